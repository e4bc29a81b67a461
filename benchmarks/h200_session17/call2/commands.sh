# Session 17, device call 2 (carry .exp/rope and .exp/splitk: worktrees of the experiment
# branches exp/rope-in-attention and exp/vision-split-k): each branch's GPU tests, then engine
# A/Bs (engine B with the change on for RoPE; engine B on cuBLAS for split-K, whose default is on).
export PYTHONUNBUFFERED=1
ab() { name=$1; shift; timeout 170 python3 engine_ab.py "$@" --iters 100 --json $OUT/ab_$name.json > /tmp/ab_$name.log 2>&1; echo "== $name rc $?"; grep "^batch" /tmp/ab_$name.log | cut -c1-400; }
cd .exp/rope && export PYTHONPATH=$PWD
timeout 120 python3 -m pytest --noconftest -p no:cacheprovider -m gpu test/test_engine_gpu.py test/test_engine_kernels.py -q -k "rope or attention" 2>&1 | tail -3
cd benchmarks
ab rope --b-config ROPE_IN_ATTENTION_MAX_BATCH=16 --batches 1,8 --frame-pool 8
ab rope_ahead --b-config ROPE_IN_ATTENTION_MAX_BATCH=16 --batches 1 --frames-ahead
cd ../../splitk && export PYTHONPATH=$PWD
timeout 120 python3 -m pytest --noconftest -p no:cacheprovider -m gpu test/test_engine_gpu.py test/test_engine_kernels.py -q -k "split_k" 2>&1 | tail -3
cd benchmarks
ab splitk_vs_cublas --tuned h200_session14/tuned/split_k_off.json --batches 1,8 --frame-pool 8
timeout 100 python3 tune_kernels.py --only split_k --json $OUT/split_k_tuning.json 2>&1 | grep -v Warn | tail -12 | cut -c1-200
