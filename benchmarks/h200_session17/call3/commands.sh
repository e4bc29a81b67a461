# Session 17, device call 3 (main, carry .whl and .exp/rope, a worktree of exp/rope-in-attention),
# trimmed to the device time left after failed starts:
# 1. the corrected NVML test (call 1 compared NVML's memory total with CUDA's, which differ by
#    the memory CUDA does not offer: 150754820096 vs 150109880320 B);
# 2. RoPE inside the suffix attention again at batch 1, with tiles that ptxas compiles without
#    register spills (call 2's tiles spilled 20 KB per thread at batch 1); engine_ab also
#    compares B's chunks with A's.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/nvidia_ml_py*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 60 python3 -m pytest --noconftest -p no:cacheprovider -m gpu test/test_engine_gpu.py -q -k nvml 2>&1 | tail -4
cd .exp/rope/benchmarks && export PYTHONPATH=/tmp/site:$(cd .. && pwd)
timeout 150 python3 engine_ab.py --b-config ROPE_IN_ATTENTION_MAX_BATCH=16 --tuned exp_rope_in_attention/tiles_without_spills.json --batches 1 --frame-pool 8 --iters 60 --json $OUT/ab_rope_tiles.json 2>&1 | grep "^batch\|^B against\|Error" | cut -c1-400
