# Session 17, device call 1 (main, carry .whl): the GPU tests of main, the benchmark against
# LeRobot with the equivalence check, and the graph timeline. Each step has its own time limit so
# that one slow step cannot lose the others' results.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
timeout 200 python3 -m pytest --noconftest -p no:cacheprovider -m gpu test/test_engine_gpu.py test/test_engine_kernels.py -q > $OUT/gpu_tests.log 2>&1; tail -3 $OUT/gpu_tests.log
timeout 300 python3 -m pi0_ros.bench --dims full --precision bf16 --device cuda --batches 1,8 --iters 100 --lerobot-iters 20 --check --out $OUT/bench > $OUT/bench.log 2>&1; echo "bench rc $?"; grep -v Warning $OUT/bench.log | tail -30 | cut -c1-220
cd benchmarks
timeout 90 python3 graph_timeline.py --calls 3 --json $OUT/timeline.json 2>&1 | grep -v Warn | head -16 | cut -c1-140
