#!/usr/bin/env bash
# Issue 58's GPU measurements in one short run (under 8 minutes on one H100 or H200):
#   1. benchmarks/bench_batch.py: calibrate at --batch 1 and --batch 16 on the GPU, the boxes and every
#      summary figure compared (what the default batch on CUDA changes);
#   2. benchmarks/bench_calibrate.py: calibrate against plain Ultralytics val on the GPU, side by side, on the
#      embedded demo (400 + 400 images) and on a larger demo (LARGE images a split, default 2000).
# Everything lands under $OUT (JSON and logs); the docs' tables are written from it afterwards, here.
#
# The GPU machine has Python 3.12 and torch with CUDA but no Ultralytics, polars or pycocotools, and no
# package registry; what it needs travels with the working tree (at most 64 MiB). So, from the repository
# root of the checkout the device tool sends:
#
#   bash benchmarks/gpu_check.sh prepare     # here, with pip: the wheels into .whl/ (ignored), polars' runtime
#                                            # re-packed as .tar.xz, the model files the run does not read set
#                                            # aside in $ASIDE (default /tmp/det_calib_gpu_aside)
#   device run: command "bash benchmarks/gpu_check.sh run", carry [".whl"], timeout_s 540
#   bash benchmarks/gpu_check.sh finish DIR  # here: DIR the run's files (files_at): writes
#                                            # docs/generated/batch_capture_gpu.md and bench_calibrate_gpu.md,
#                                            # puts the model files back (also: `restore` alone)
set -euo pipefail
cd "$(dirname "$0")/.."
ASIDE=${ASIDE:-/tmp/det_calib_gpu_aside}
LARGE=${LARGE:-2000}
# the model files and notebook that neither benchmark reads (about 33 MB of the 64 MiB a transfer may carry)
SET_ASIDE="det_calib/demo/assets/yolo26n_shapes_seg.pt det_calib/demo/assets/yolo26n_shapes_pose.pt
det_calib/demo/assets/yolo26n_shapes_obb.pt det_calib/demo/assets/yolo26n_shapes_seed1.pt
det_calib/demo/assets/yolo26n_shapes_seed2.pt det_calib/demo/assets/yolo26n_shapes_cls.pt notebooks/tutorial.ipynb"

prepare() {
    # the versions this project is tested with; wheels for the GPU machine's CPython 3.12 on x86-64
    local want="ultralytics==8.4.190 ultralytics-thop==2.2.3 polars==2.1.0 polars-runtime-32==2.1.0 pycocotools==2.0.11"
    rm -rf .whl && mkdir -p .whl
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .whl $want
    local rt tmp
    rt=$(ls .whl/polars_runtime_32-*.whl)
    tmp=$(mktemp -d)
    (cd "$tmp" && unzip -q "$OLDPWD/$rt")
    XZ_OPT="-6 -T0" tar -cJf .whl/polars_runtime_32.tar.xz -C "$tmp" .  # 54 MB as a wheel, 33 MB as xz -6
    rm -rf "$tmp" "$rt"
    mkdir -p "$ASIDE"
    for f in $SET_ASIDE; do
        if [ -e "$f" ]; then mkdir -p "$ASIDE/$(dirname "$f")" && mv "$f" "$ASIDE/$f"; fi
    done
    du -sh .whl
    echo "set aside in $ASIDE (put back with: bash benchmarks/gpu_check.sh restore)"
    echo "tracked files left: $(git ls-files -z | du -ch --files0-from=- 2>/dev/null | tail -1 | cut -f1), .whl: $(du -sh .whl | cut -f1) (64 MiB may travel)"
}

restore() {
    for f in $SET_ASIDE; do
        if [ -e "$ASIDE/$f" ]; then mv "$ASIDE/$f" "$f"; fi
    done
    git status --short -- det_calib/demo/assets notebooks
}

run() {
    OUT=${OUT:-/tmp/gpu_check_out}
    mkdir -p "$OUT" /tmp/site
    if [ -d .whl ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
        tar -xJf .whl/polars_runtime_32.tar.xz -C /tmp/site
    fi
    export PYTHONPATH="$PWD:/tmp/site" YOLO_OFFLINE=1 PYTHONUNBUFFERED=1
    {
        nvidia-smi -L || true
        python3 -c "import torch, ultralytics, polars, pycocotools; print('torch', torch.__version__, 'cuda', \
torch.cuda.is_available(), '| ultralytics', ultralytics.__version__, '| polars', polars.__version__)"
    } 2>&1 | tee "$OUT/device.txt"
    # DEVICE, BUDGET (seconds for both benchmarks) and EXTRA (calibrate options, e.g. "--limit 40") are for
    # a dry run of this script on a CPU: DEVICE=cpu LARGE=16 EXTRA="--limit 40" bash benchmarks/gpu_check.sh run
    local t0=$SECONDS device=${DEVICE:-0} budget=${BUDGET:-450} extra=()
    if [ -n "${EXTRA:-}" ]; then read -r -a extra <<< "-- $EXTRA"; fi
    # 450 s for both (the demo data is rendered by the first calibrate, 800 images; the larger demo by
    # bench_calibrate, whose JSON holds each pair as soon as it is measured)
    timeout $((budget / 3)) python3 benchmarks/bench_batch.py --device "$device" --batch 16 \
        --json "$OUT/batch_capture.json" "${extra[@]}" > "$OUT/batch_capture.log" 2>&1 \
        || echo "bench_batch failed (exit $?): see batch_capture.log"
    echo "bench_batch: $((SECONDS - t0)) s"
    timeout $((budget - (SECONDS - t0))) python3 benchmarks/bench_calibrate.py --device "$device" --repeats 1 \
        --large "$LARGE" --json "$OUT/bench_calibrate.json" "${extra[@]}" > "$OUT/bench_calibrate.log" 2>&1 \
        || echo "bench_calibrate failed (exit $?): see bench_calibrate.log"
    echo "both: $((SECONDS - t0)) s"
    tail -n 40 "$OUT/batch_capture.log" "$OUT/bench_calibrate.log"
}

finish() {
    local dir=${1:?give the folder the run files came back in}
    python3 benchmarks/bench_batch.py --from-json "$dir/batch_capture.json" --doc
    python3 benchmarks/bench_calibrate.py --from-json "$dir/bench_calibrate.json" --doc
    restore
}

case "${1:-}" in
    prepare) prepare ;;
    run) run ;;
    finish) shift; finish "$@" ;;
    restore) restore ;;
    *) echo "usage: bash benchmarks/gpu_check.sh prepare | run | finish DIR | restore" >&2; exit 2 ;;
esac
