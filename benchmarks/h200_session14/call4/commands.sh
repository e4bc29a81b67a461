python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pytest --noconftest -p no:cacheprovider -m gpu test/test_engine_gpu.py test/test_engine_kernels.py -q > $OUT/gpu_tests.log 2>&1; tail -3 $OUT/gpu_tests.log
python3 -m pi0_ros.bench --dims full --precision bf16 --device cuda --batches 1,8 --iters 100 --lerobot-iters 20 --check --out $OUT/bench > $OUT/bench.log 2>&1; grep -v Warning $OUT/bench.log | tail -40 | cut -c1-200
cd benchmarks
python3 graph_timeline.py --calls 3 --json $OUT/timeline.json 2>&1 | grep -v Warn | head -16 | cut -c1-140
python3 engine_ab.py --b-config VISION_ATTENTION_TRITON=0 --batches 1 --frames-ahead --iters 100 --json $OUT/ab_vision_off_ahead.json 2>&1 | grep "^batch" | cut -c1-330
