python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
python3 -m pytest --noconftest -p no:cacheprovider -m gpu test/test_engine_kernels.py -q -k "prefetching_the_next or skinny_linear_on" 2>&1 | tail -3 | tee $OUT/gpu_tests.log
cd benchmarks
ab() { name=$1; shift; python3 engine_ab.py "$@" --iters 100 --json $OUT/ab_$name.json > $OUT/ab_$name.log 2>&1; echo "== $name"; tail -2 $OUT/ab_$name.log | cut -c1-400; }
ab next_all --b-config PREFETCH_NEXT_WEIGHTS=qkv,o,gate_up,down --batches 1
ab next_o --b-config PREFETCH_NEXT_WEIGHTS=o --batches 1
ab rope_first --b-config PDL_LAUNCH_FIRST=norm,rope --batches 1
python3 graph_timeline.py --calls 3 --json $OUT/timeline.json > $OUT/timeline.log 2>&1; head -30 $OUT/timeline.log | cut -c1-150
