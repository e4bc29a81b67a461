# GPU steps, from the repository root of main:
#   bash benchmarks/pending_gpu_runs.sh STEP ...        (none: h200_goal)
# carry ['.whl', '.gpusoak', 'benchmarks/node_gap/wheels'] (bash scripts/make_gpu_bundle.sh; the
# py-spy wheel for the fleet steps). A device call returns at most 8 files and runs at most
# 600 s, so one call per step. Run on an H100 on 2026-12-07 (records fleet-goal-h100,
# qkv-rope-h100): gpu_tests, qkv_rope, goal, gil. Still to run: h200_goal on an H200, the GPU
# issue 28's goal names (none was lent then).
# Steps:
#   gpu_tests     the GPU tests of the turn's tail callback, the fused qkv + RoPE kernel, the
#                 steady state and graph equality (test_engine_gpu.py)
#   qkv_rope      the fused qkv + RoPE kernel's tiles against the skinny GEMM + rope_qkv
#                 (tune_kernels --only qkv_rope), then the engine with it (the default since
#                 2026-12-07) at batch 1 and 2 against without (B), the best tile applied
#   goal          8 arms in 2 processes (publish_on_chunk on, off, on with denoise_tail, on) and
#                 in 3 (on), 20 s each (FP8 prefix MLP layers 4-16, max_batch 4, blend)
#   gil           publish_on_chunk, GIL switch interval 0.05 ms against 0.2 ms: 3 processes
#                 (4 runs in turns), then 2 (2 runs); 8 files, ~7 min
#   h200_goal     issue 28's goal with config/fleet_8_arms.yaml's settings in 3 processes, 3 runs,
#                 then bf16 (no FP8) once; 6 files, ~5 min
export PYTHONUNBUFFERED=1
SITE=/tmp/site
FLEET_BASE=blend/prefix_fp8_layers:=4-16

install_site() {
    [ -d "$SITE/lerobot" ] || python3 -m pip install -q --no-index --no-deps --no-compile \
        --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
}

fleet_profile() {  # OUT subfolder, processes, modes
    MODES="$3" FLEET_ARGS="--max-batch 4 --processes $2" DURATION=${DURATION:-15} PROFILE_AFTER=22 \
        PROFILE_S=6 OUT="$OUT/$1" timeout 560 bash benchmarks/run_fleet_profile.sh 2>&1 \
        | grep -v -i warn | cut -c1-300
}

for step in ${*:-h200_goal}; do
    echo "== $step"
    case $step in
    gpu_tests)
        install_site
        PYTHONPATH=$SITE:$PWD timeout 300 python3 -m pytest --noconftest -p no:cacheprovider \
            -m gpu -q test/test_engine_gpu.py \
            -k "gpu_tail or fused_qkv or steady_state or graphs_equal" 2>&1 | tail -15 ;;
    qkv_rope)
        install_site
        (cd benchmarks && PYTHONPATH=$SITE:$PWD/.. timeout 150 python3 tune_kernels.py \
            --only qkv_rope --json "$OUT/qkv_rope_tuning.json" 2>&1 | grep "^qkv_rope\|best")
        (cd benchmarks && PYTHONPATH=$SITE:$PWD/.. timeout 240 python3 engine_ab.py \
            --tuned "$OUT/qkv_rope_tuning.json" --b-config QKV_ROPE_MAX_ROWS=0 --batches 1,2 \
            --frame-pool 8 --iters 200 --json "$OUT/ab_qkv_rope.json" 2>&1 \
            | grep "^batch\|^B against\|peak" | cut -c1-400) ;;
    goal)
        # The chunk latency taken on reception by the middleware (fleet_bench since 2026-12-07),
        # with the node's split of the wait outside the call; denoise_tail once beside.
        DURATION=${DURATION:-20}
        ON_CHUNK=$FLEET_BASE/publish_on_chunk:=true
        fleet_profile goal_p2 2 \
            "$ON_CHUNK,$FLEET_BASE,$ON_CHUNK/gpu_turn_release:=denoise_tail,$ON_CHUNK"
        fleet_profile goal_p3 3 "$ON_CHUNK"
        rm -f "$OUT/goal_p3/gpu.txt" ;;  # the device tool returns at most 8 files
    h200_goal)
        DURATION=${DURATION:-20}
        ON_CHUNK=$FLEET_BASE/publish_on_chunk:=true
        fleet_profile h200_goal 3 "$ON_CHUNK,$ON_CHUNK,$ON_CHUNK,blend/publish_on_chunk:=true" ;;
    gil)
        # The control thread waits for the GIL (py-spy, goal runs): the fleet's GIL switch
        # interval 0.05 ms against the default 0.2, with publish_on_chunk, 3 then 2 processes.
        DURATION=${DURATION:-20}
        ON_CHUNK=$FLEET_BASE/publish_on_chunk:=true
        SHORT=$ON_CHUNK/gil_switch_interval:=0.00005
        fleet_profile gil_p3 3 "$ON_CHUNK,$SHORT,$ON_CHUNK,$SHORT"
        fleet_profile gil_p2 2 "$SHORT,$ON_CHUNK"
        rm -f "$OUT"/gil_p*/gpu.txt ;;  # the device tool returns at most 8 files
    *)
        echo "unknown step $step (gpu_tests, qkv_rope, goal, gil, h200_goal)"
        exit 2 ;;
    esac
done
