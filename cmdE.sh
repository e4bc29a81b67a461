set -o pipefail; python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pytest --noconftest -p no:cacheprovider -m gpu test/test_engine_gpu.py test/test_engine_kernels.py -q -x 2>&1 | tail -30 > $OUT/gpu_tests.log; tail -3 $OUT/gpu_tests.log
(cd benchmarks && python3 engine_ab.py --b-option overlap_first_step=0 --batches 1,8 --iters 100 --json $OUT/ab_overlap.json 2>&1 | tail -3 | tee $OUT/ab_overlap.log)
