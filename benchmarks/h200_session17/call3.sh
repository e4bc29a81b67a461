# Session 17, device call 3 (main): the corrected NVML test (call 1 compared NVML's memory total
# with CUDA's, which differ by the memory CUDA does not offer: 150754820096 vs 150109880320 B).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/nvidia_ml_py*.whl && export PYTHONPATH=/tmp/site:$PWD
python3 -m pytest --noconftest -p no:cacheprovider -m gpu test/test_engine_gpu.py -q -k "nvml or memory" 2>&1 | tail -15
# Where batch 8's 68 ms go (the vision stage is 12.1 ms there for 24 images): the graphs' kernel
# timeline at batch 8.
cd benchmarks && timeout 150 python3 graph_timeline.py --calls 2 --batch 8 --json $OUT/timeline_b8.json 2>&1 | grep -v Warn | head -30 | cut -c1-150
