# thunder: setup, demo and tests. Every target is idempotent.
PYTHON ?= python3
BUILD ?= build
JOBS ?= $(shell nproc)
# timm and torchvision where none is installed (make deps; benchmarks/libraries.py reads it).
VISION_LIBS := .vision-libs
export PYTHONPATH := $(CURDIR)/python$(if $(PYTHONPATH),:$(PYTHONPATH),)
# The CPU kernels' -march for the fuser and the tests (native where empty): x86-64-v3 tests what
# a CPU with AVX2 and no AVX-512 runs.
THUNDER_CPU_MARCH ?=
export THUNDER_CPU_MARCH

.PHONY: setup deps build develop demo test test-cpp test-python fuzz asan bench clean

setup: deps build develop

# Installs what is missing and nothing else: torch (the CPU build, pinned), pytest, numpy, the model
# libraries (transformers, torch_geometric, timm, torchvision, diffusers), ninja, NVRTC, GoogleTest.
deps:
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PYTHON) -m pip install -q torch==2.13.0
	@$(PYTHON) -c "import pytest" 2>/dev/null || $(PYTHON) -m pip install -q pytest || echo "pytest could not be installed"
	@$(PYTHON) -c "import numpy" 2>/dev/null || $(PYTHON) -m pip install -q numpy || echo "numpy could not be installed (seed 001's tests need it)"
	@# The model suite's tests (benchmarks/models.py) and the Hugging Face models of test_models.py.
	@# transformers requires no torch: the pin installs without touching the one above.
	@$(PYTHON) -c "import transformers" 2>/dev/null || $(PYTHON) -m pip install -q transformers==5.17.0 || \
	  echo "transformers could not be installed (the model suite's tests will be skipped)"
	@# torch_geometric (GCNConv, GATConv in test_dynamo.py) is pure Python and requires no torch.
	@$(PYTHON) -c "import torch_geometric" 2>/dev/null || $(PYTHON) -m pip install -q torch_geometric==2.8.1 || \
	  echo "torch_geometric could not be installed (its tests in test_dynamo.py will be skipped)"
	@# timm, torchvision and diffusers: the suite's vision and diffusion models, the float64 model
	@# sweep's and the autocast tests'. None of them may bring another torch. PyPI's x86_64
	@# torchvision is built for CUDA torch: beside the CPU build its compiled ops do not load and its
	@# import fails, and transformers imports any torchvision it finds. So where none is installed,
	@# torchvision (the release made with torch 2.13) and timm go into $(VISION_LIBS), without their
	@# dependencies (transformers brings timm's), where only the suite, the sweeps and the tests look
	@# (benchmarks/libraries.py). diffusers and pillow require no torch.
	@$(PYTHON) -c "import PIL" 2>/dev/null || $(PYTHON) -m pip install -q pillow || echo "pillow could not be installed"
	@$(PYTHON) -c "import importlib.util as u, sys; sys.exit(u.find_spec('torchvision') is None)" || [ -d $(VISION_LIBS)/torchvision ] || \
	  $(PYTHON) -m pip install -q --no-deps --target $(VISION_LIBS) torchvision==0.28.0 || \
	  echo "torchvision could not be installed (its models and timm's will be skipped)"
	@$(PYTHON) -c "import importlib.util as u, sys; sys.exit(u.find_spec('timm') is None)" || [ -d $(VISION_LIBS)/timm ] || \
	  $(PYTHON) -m pip install -q --no-deps --target $(VISION_LIBS) timm==1.0.29 || echo "timm could not be installed (its models will be skipped)"
	@$(PYTHON) -c "import diffusers" 2>/dev/null || $(PYTHON) -m pip install -q diffusers==0.42.1 || \
	  echo "diffusers could not be installed (its models will be skipped)"
	@$(PYTHON) -c "import ninja" 2>/dev/null || command -v ninja >/dev/null || $(PYTHON) -m pip install -q ninja
	@# NVRTC compiles the fuser's CUDA kernels (no GPU needed); the wheel is used where the
	@# CUDA toolkit has none. Machines without network access skip it.
	@ls /usr/local/cuda/lib64/libnvrtc.so* >/dev/null 2>&1 || \
	  $(PYTHON) -c "import nvidia, os, sys; sys.exit(not any(os.path.exists(os.path.join(p, 'cu13/lib/libnvrtc.so.13')) for p in nvidia.__path__))" 2>/dev/null || \
	  $(PYTHON) -m pip install -q nvidia-cuda-nvrtc==13.0.88 2>/dev/null || echo "NVRTC unavailable: CUDA fusion checks will be skipped"
	@if [ ! -f /usr/include/gtest/gtest.h ] && command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  (apt-get install -y -qq libgtest-dev >/dev/null 2>&1 || \
	   (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq libgtest-dev >/dev/null 2>&1)) || \
	  echo "GoogleTest could not be installed: C++ unit tests will be skipped"; \
	fi

build:
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=$$(command -v $(PYTHON)) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# Makes `import thunder` work from any directory, as an editable install does: a .pth file in the
# interpreter's site-packages puts python/ (where `build` places the extension) on sys.path. One
# copy of the extension exists, so `make build` after a change is all a user's script needs.
develop:
	@$(PYTHON) tools/develop.py

demo: setup
	$(PYTHON) examples/quickstart.py

test: setup test-cpp test-python

test-cpp:
	@if [ -x $(BUILD)/thunder_core_tests ]; then cd $(BUILD) && ctest --output-on-failure -j $(JOBS); \
	else echo "C++ unit tests not built (GoogleTest missing)"; fi

test-python:
	$(PYTHON) -m pytest -q tests/python

# The differential fuzzer (tests/python/fuzz/fuzz.py): N seeded random programs from START, eager
# against thunder.jit with each executor set; failures print a minimal repro and land in OUT.
N ?= 1000
START ?= 0
OUT ?= fuzz-failures
fuzz:
	$(PYTHON) tests/python/fuzz/fuzz.py --start $(START) --count $(N) --jobs $(JOBS) --out $(OUT)

# AddressSanitizer + UndefinedBehaviorSanitizer: the C++ core, its tests and the extension built
# into $(ASAN_BUILD) (any report aborts), then ctest and ASAN_N fuzz programs run with that
# extension. Python itself is not sanitized, so libasan is preloaded; leaks are not checked
# (CPython and torch keep allocations for the life of the process). libstdc++ is preloaded with
# libasan: CPython does not link it, and ASan's __cxa_throw interceptor then has no real function
# to call (the first C++ exception aborts with "CHECK failed: real___cxa_throw").
ASAN_BUILD ?= build-asan
ASAN_N ?= 1000
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
ASAN_ENV = ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
asan:
	@cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS="$(ASAN_FLAGS)" -DCMAKE_EXE_LINKER_FLAGS="$(ASAN_FLAGS)" \
	  -DCMAKE_SHARED_LINKER_FLAGS="$(ASAN_FLAGS)" -DCMAKE_MODULE_LINKER_FLAGS="$(ASAN_FLAGS)" \
	  -DTHUNDER_EXTENSION_DIR=$(CURDIR)/$(ASAN_BUILD)/ext \
	  -DPython3_EXECUTABLE=$$(command -v $(PYTHON)) >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	@if [ -x $(ASAN_BUILD)/thunder_core_tests ]; then cd $(ASAN_BUILD) && $(ASAN_ENV) ctest --output-on-failure -j $(JOBS); \
	else echo "C++ unit tests not built (GoogleTest missing)"; fi
	@# A copy of python/ made of links, with the sanitized extension in place of the usual one.
	@rm -rf $(ASAN_BUILD)/python && cp -rs $(CURDIR)/python $(ASAN_BUILD)/python && \
	  rm -f $(ASAN_BUILD)/python/thunder/_C*.so && cp $(ASAN_BUILD)/ext/_C*.so $(ASAN_BUILD)/python/thunder/
	PYTHONPATH=$(CURDIR)/$(ASAN_BUILD)/python LD_PRELOAD=$$($(CXX) -print-file-name=libasan.so):$$($(CXX) -print-file-name=libstdc++.so) $(ASAN_ENV) \
	  $(PYTHON) tests/python/fuzz/fuzz.py --start $(START) --count $(ASAN_N) --jobs $(JOBS) --out $(ASAN_BUILD)/fuzz-failures

bench: setup
	$(PYTHON) benchmarks/bench_overhead.py

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(VISION_LIBS) python/thunder/_C*.so
