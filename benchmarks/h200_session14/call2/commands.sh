export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m pytest --noconftest -p no:cacheprovider -m gpu test/test_engine_kernels.py -q -k "self_attention or attention_on_the_gpu" 2>&1 | tail -3 | tee $OUT/gpu_tests.log
cd benchmarks
ab() { name=$1; shift; python3 engine_ab.py "$@" --iters 100 --json $OUT/ab_$name.json > $OUT/ab_$name.log 2>&1; echo "== $name"; grep "^batch" $OUT/ab_$name.log | cut -c1-400; }
ab vision_triton --b-config VISION_ATTENTION_TRITON=1 --batches 1,8 --frame-pool 8
ab first_step_priority0 --b-config FIRST_STEP_STREAM_PRIORITY=0 --batches 1,8 --frame-pool 8
ab vision_triton_ahead --b-config VISION_ATTENTION_TRITON=1 --batches 1 --frames-ahead
