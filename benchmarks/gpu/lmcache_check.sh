#!/usr/bin/env bash
# Issue 19, step 1: do LMCache 0.5.x's compiled CUDA ops load with the lent H200's torch
# (PyTorch 2.11.0+cu130, Python 3.12) next to vLLM 0.26.0 from ../shared/gpu?
#
# Wheel's torch requirement (lmcache-0.5.6 METADATA): "Requires-Dist: torch" -- unpinned, no version.
# The build pin is not in METADATA. lmcache/cuda_ops.*.so links the full (unstable) libtorch C++ ABI
# (libc10, libc10_cuda, libtorch_cpu, libtorch_cuda, libtorch_python) and libcudart.so.13 (CUDA 13.0,
# sm_75..sm_120 incl. sm_90). Offline symbol check against torch-2.11.0+cu130's libraries: one symbol is
# missing, c10::NotImplementedError::NotImplementedError(c10::SourceLocation, std::string), which
# torch 2.13.0 exports -> cuda_ops 0.5.4/0.5.5/0.5.6 were built against torch newer than 2.11
# (upstream pyproject on main pins the build torch==2.13.0). In 0.5.4+ a failed cuda_ops import is
# soft: `import lmcache` logs a warning and stays on the pure-torch fallback ops.
# .whl/alt/ holds lmcache 0.5.3 (compiled module lmcache.c_ops, imported hard): all its torch symbols
# resolve against 2.11, and it uses c10::impl::cow::materialize_cow_storage, which 2.13 no longer
# exports -> built against torch <= 2.12. It is checked here too, in its own process.
#
# Usage on the device (after c1/c2 of ../shared/gpu are installed), carry .whl (and .gpu/s):
#   source .gpu/s/env.sh && bash benchmarks/gpu/lmcache_check.sh
# Writes $OUT/lmcache_check.txt (and stdout). Runs in well under 60 s; always exits 0.
set +e
OUTDIR=${OUT:-/tmp/lmcache_check_out}
mkdir -p "$OUTDIR"
F="$OUTDIR/lmcache_check.txt"
W=/tmp/lmcache_check_work
rm -rf "$W" && mkdir -p "$W"

cat > "$W/check.py" <<'PY'
import glob, importlib, importlib.metadata as md, os, sys, time, traceback
label = sys.argv[1]
t0 = time.time()
def hdr(s): print(f"\n--- [{label}] {s} (t={time.time()-t0:.1f}s)", flush=True)
def tb(): print("FAILED:\n" + traceback.format_exc().rstrip(), flush=True)
def ver(n):
    try: return md.version(n)
    except Exception: return "-"

hdr("python / torch")
print("python", sys.version.split()[0], sys.executable)
print("sys.path[:4]", sys.path[:4])
torch = None
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda, "file", torch.__file__)
    print("cxx11_abi", torch.compiled_with_cxx11_abi(), "cuda.is_available", torch.cuda.is_available())
    if torch.cuda.is_available():
        print("device", torch.cuda.get_device_name(0), "cap", torch.cuda.get_device_capability(0),
              "arch_list", torch.cuda.get_arch_list())
except Exception:
    tb()

hdr("package versions (importlib.metadata, first on sys.path)")
for n in ["lmcache", "vllm", "numpy", "transformers", "huggingface-hub", "protobuf", "grpcio",
          "prometheus-client", "opentelemetry-api", "opentelemetry-sdk", "cupy-cuda13x", "cuda-bindings",
          "cuda-python", "nvidia-cuda-runtime", "cryptography", "cffi", "nvtx", "aiofile", "caio", "numba"]:
    print(f"  {n}=={ver(n)}")

hdr("import lmcache")
lmc = None
try:
    import lmcache as lmc
    print("lmcache", getattr(lmc, "__version__", "?"), "file", lmc.__file__)
    dops = getattr(lmc, "device_ops", None)
    print("lmcache.device_ops:", type(dops).__name__ if dops is not None else None,
          "_native_bound=", getattr(dops, "_native_bound", "n/a"))
except Exception:
    tb()

mods = {}
if lmc is not None:
    sos = sorted(glob.glob(os.path.join(os.path.dirname(lmc.__file__), "*.so")))
    for so in sos:
        name = os.path.basename(so).split(".")[0]
        hdr(f"import compiled module lmcache.{name}  ({os.path.getsize(so)} bytes)")
        try:
            m = importlib.import_module(f"lmcache.{name}")
            pub = [a for a in dir(m) if not a.startswith("_")]
            print(f"OK lmcache.{name}: {len(pub)} public names, e.g. {pub[:12]}")
            mods[name] = m
        except BaseException as e:
            tb()
            if "undefined symbol" in str(e):
                print("NOTE: undefined symbol => built against a different torch (C++ ABI) than this one")

ops = mods.get("cuda_ops") or mods.get("c_ops")
hdr("tiny CUDA op: calculate_cdf (native vs lmcache's torch fallback)")
if ops is None or torch is None or not torch.cuda.is_available():
    print("skipped: compiled CUDA ops not loaded or no CUDA")
elif not hasattr(ops, "calculate_cdf"):
    print("skipped: no calculate_cdf in", ops.__name__)
else:
    try:
        torch.manual_seed(0)
        x = torch.randint(0, 32, (2, 64, 128), dtype=torch.int8, device="cuda")
        out = ops.calculate_cdf(x, 32)
        torch.cuda.synchronize()
        print(f"{ops.__name__}.calculate_cdf -> shape {tuple(out.shape)} dtype {out.dtype} device {out.device}")
        ref = None
        for path in ("lmcache.v1.platform.torch_ops.cachegen_kernels", "lmcache.v1.platform.torch_ops"):
            try:
                ref = importlib.import_module(path).calculate_cdf(x, 32); break
            except Exception:
                continue
        if ref is not None:
            eq = torch.equal(out.to(torch.int64), ref.to(torch.int64))
            diff = (out.to(torch.int64) - ref.to(torch.int64)).abs().max().item()
            print(f"matches torch fallback: {eq} (max abs diff {diff})")
        else:
            print("no torch fallback found to compare with")
    except Exception:
        tb()

hdr("vLLM LMCacheConnectorV1 module")
try:
    import vllm
    print("vllm", vllm.__version__, vllm.__file__)
    from vllm.distributed.kv_transfer.kv_connector.v1 import lmcache_connector
    print("OK lmcache_connector.LMCacheConnectorV1:", lmcache_connector.LMCacheConnectorV1)
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    reg = getattr(KVConnectorFactory, "_registry", {})
    print("factory registry LMCache entries:", [k for k in reg if "LMCache" in k])
except Exception:
    tb()
hdr("lmcache.integration.vllm.vllm_v1_adapter (what LMCacheConnectorV1 imports by default)")
try:
    from lmcache.integration.vllm.vllm_v1_adapter import LMCacheConnectorV1Impl
    print("OK", LMCacheConnectorV1Impl)
except Exception:
    tb()
hdr("vllm ...v1.lmcache_integration (use_native=True path)")
try:
    from vllm.distributed.kv_transfer.kv_connector.v1 import lmcache_integration
    print("OK", lmcache_integration.vllm_v1_adapter.LMCacheConnectorV1Impl)
except Exception:
    tb()
hdr("done")
PY

main() {
  echo "=== lmcache_check $(date -u +%FT%TZ) host=$(hostname) pwd=$PWD"
  nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader 2>&1 | head -2
  echo "PYTHONPATH(before)=${PYTHONPATH:-}"
  echo "=== wheels (bytes name)"
  for w in .whl/*.whl .whl/alt/*.whl; do [ -f "$w" ] && stat -c '%12s %n' "$w"; done
  du -sb .whl 2>/dev/null | awk '{printf "total .whl: %d bytes (%.1f MiB)\n", $1, $1/1048576}'

  echo "=== pip install -> /tmp/site (main) and /tmp/site_alt (.whl/alt)"
  ( timeout -k 2 20 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl > "$W/pip_main.txt" 2>&1; echo "rc=$?" >> "$W/pip_main.txt" ) &
  if ls .whl/alt/*.whl > /dev/null 2>&1; then
    ( timeout -k 2 20 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site_alt .whl/alt/*.whl > "$W/pip_alt.txt" 2>&1; echo "rc=$?" >> "$W/pip_alt.txt" ) &
  fi
  wait
  echo "[main] $(cat "$W/pip_main.txt" 2>/dev/null | tail -5)"
  [ -f "$W/pip_alt.txt" ] && echo "[alt]  $(tail -5 "$W/pip_alt.txt")"
  echo "installed dists in /tmp/site: $(ls -d /tmp/site/*.dist-info 2>/dev/null | xargs -n1 basename 2>/dev/null | tr '\n' ' ')"
  echo "install done at ${SECONDS}s"

  # Both checks run at once (16 cores), each capped so the whole script stays under 60 s.
  export LMCACHE_TRACK_USAGE=false DO_NOT_TRACK=1 PYTHONUNBUFFERED=1
  ( PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} timeout -k 2 38 python3 "$W/check.py" main \
      > "$W/main.txt" 2>&1; echo "exit code: $?" >> "$W/main.txt" ) &
  if [ -d /tmp/site_alt/lmcache ]; then
    ( PYTHONPATH=/tmp/site_alt:/tmp/site${PYTHONPATH:+:$PYTHONPATH} timeout -k 2 38 python3 "$W/check.py" alt \
        > "$W/alt.txt" 2>&1; echo "exit code: $?" >> "$W/alt.txt" ) &
  fi
  wait
  echo; echo "=================== main: lmcache from .whl/ ==================="
  cat "$W/main.txt"
  if [ -f "$W/alt.txt" ]; then
    echo; echo "=================== alt: lmcache from .whl/alt/ (deps from .whl/) ==================="
    cat "$W/alt.txt"
  fi
  echo; echo "=== total ${SECONDS}s"
}
main 2>&1 | tee "$F"
exit 0
