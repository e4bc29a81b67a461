# Call 2: GPU tests, the engine A/B of the norm prologue (batch 1), then the bench with LeRobot
# in the same run on the code without it (NORM_PROLOGUE_MAX_ROWS=0), then the timeline if time.
export PYTHONUNBUFFERED=1
cp -r .gpu48/tree/. .
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD:$PWD/.gpu48/stub
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
timeout 120 python3 -m pytest --noconftest -p no:cacheprovider -m gpu -q test/test_engine_gpu.py -k "norm_prologue or fused_qkv or steady_state or graphs_equal" > $OUT/gpu_tests.log 2>&1; echo "tests rc $?"; tail -3 $OUT/gpu_tests.log | cut -c1-300
cd benchmarks
timeout 130 python3 engine_ab.py --b-config NORM_PROLOGUE_MAX_ROWS=0 --batches 1 --frame-pool 8 --iters 200 --json $OUT/ab_norm_on_vs_off.json 2>&1 | grep "^batch\|^B against\|peak\|Error" | cut -c1-400
cd ..
timeout 250 python3 -m pi0_ros.tools.bench --dims full --precision bf16 --device cuda --batches 1,8 --iters 100 --lerobot-iters 10 --check --kernel-config NORM_PROLOGUE_MAX_ROWS=0 --out $OUT/bench > $OUT/bench.log 2>&1; echo "bench rc $?"; grep -v -i warn $OUT/bench.log | tail -20 | cut -c1-220
