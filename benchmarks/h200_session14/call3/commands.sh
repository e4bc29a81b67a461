export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m pytest --noconftest -p no:cacheprovider -m gpu test/test_engine_kernels.py -q -k "self_attention" 2>&1 | tail -2 | tee $OUT/gpu_tests.log
cd benchmarks
ab() { name=$1; shift; python3 engine_ab.py "$@" --iters 100 --json $OUT/ab_$name.json > $OUT/ab_$name.log 2>&1; echo "== $name"; grep "^batch" $OUT/ab_$name.log | cut -c1-330; }
ab first_step_priority_high --b-config FIRST_STEP_STREAM_PRIORITY=-1 --batches 1
ab prefix_priority_high --b-config PREFIX_STREAM_PRIORITY=-1 --batches 1,8 --frame-pool 8
for v in v64x64w4s2 v128x64w8s2 v32x64w4s2 v64x128w4s2; do
ab vision_$v --b-config VISION_ATTENTION_TRITON=1 --tuned h200_session14/tuned/vision_$v.json --batches 1
done
