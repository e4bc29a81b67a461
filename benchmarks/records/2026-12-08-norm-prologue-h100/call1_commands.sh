# Call 1: GPU tests, the norm-prologue tiles, the engine A/B in both build orders (batch 1).
export PYTHONUNBUFFERED=1
cp -r .gpu48/tree/. .
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD:$PWD/.gpu48/stub
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
git log -1 --format=%h 2>/dev/null
timeout 170 python3 -m pytest --noconftest -p no:cacheprovider -m gpu -q test/test_engine_gpu.py -k "norm_prologue or fused_qkv or steady_state or graphs_equal" > $OUT/gpu_tests.log 2>&1; echo "tests rc $?"; tail -4 $OUT/gpu_tests.log | cut -c1-300
cd benchmarks
timeout 80 python3 tune_kernels.py --only norm_prologue --json $OUT/norm_tiles.json 2>&1 | grep "^norm\|failed\|Error" | cut -c1-300
timeout 150 python3 engine_ab.py --b-config NORM_PROLOGUE_MAX_ROWS=0 --batches 1 --frame-pool 8 --iters 300 --json $OUT/ab1_on_vs_off.json 2>&1 | grep "^batch\|^B against\|peak\|Error" | cut -c1-400
timeout 150 python3 -c "
import sys
from pi0_ros.engine import kernel_configs
kernel_configs.NORM_PROLOGUE_MAX_ROWS = 0  # engine A: the norm kernels; B: the prologue
import engine_ab
sys.exit(engine_ab.main(['--b-config', 'NORM_PROLOGUE_MAX_ROWS=64', '--batches', '1', '--frame-pool', '8', '--iters', '300', '--json', '$OUT/ab2_off_vs_on.json']))
" 2>&1 | grep "^batch\|^B against\|peak\|Error" | cut -c1-400
