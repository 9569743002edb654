# libtzr build. `make` builds the libraries and tools, `make test` runs the
# suite, `make demo` runs the built-in example. See README.md.
PREFIX ?= /usr/local
CC ?= cc
BUILD ?= build
SAN ?=
OPT ?= -O2
CFLAGS_BASE = -std=c11 -D_GNU_SOURCE $(OPT) -g -Wall -Wextra -Wshadow -Wno-unused-parameter \
              -fPIC -fvisibility=hidden -Iinclude $(SRC_INCLUDES) $(SAN)
# src/ is one folder per layer (docs/architecture.md); every folder is on the
# include path, so files include each other's headers by name.
SRC_DIRS := $(sort $(dir $(wildcard src/*/*.c src/*/*.h)))
SRC_INCLUDES := $(addprefix -I,$(SRC_DIRS:%/=%))
PKGS = libsodium libcrypto libisal zlib jansson libcurl libzstd
# The flags below come from pkg-config when the Makefile is read. Reading
# it installs nothing: `make deps` (and `make test`, `make demo`, which
# call it first and then build in a fresh make) run scripts/deps.sh; a
# plain `make` without the packages stops at $(BUILD)/.deps saying so.
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
LIBS = $(PKG_LIBS) -lpthread -ldl -lm
CFLAGS += $(CFLAGS_BASE) $(PKG_CFLAGS)
LDFLAGS += $(SAN)
# ---- MPI (optional; src/comm/, tests/mpi_test.sh) ----
# Found through pkg-config (Debian openmpi: ompi-c). Without it the library
# still builds and the multi-rank loaders return TZR_ENOTSUP.
MPI_CFLAGS := $(shell pkg-config --cflags ompi-c 2>/dev/null)
MPI_LIBS := $(shell pkg-config --libs ompi-c 2>/dev/null)
ifneq ($(strip $(MPI_LIBS)),)
CFLAGS += $(MPI_CFLAGS) -DTZR_HAVE_MPI
LIBS += $(MPI_LIBS)
endif
# MPI test programs (a pattern rule, so never the default goal).
$(BUILD)/mpi/%: tests/mpi/%.c $(wildcard tests/util/*.c tests/util/*.h) $(BUILD)/libtzr.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/util $< $(wildcard tests/util/*.c) $(BUILD)/libtzr.a $(LDFLAGS) $(LIBS) -o $@
# ---- end MPI ----

# The version is written once, in include/tzr.h; the soname follows its major.
tzr_version_part = $(shell sed -n 's/^\#define TZR_VERSION_$(1) \([0-9]*\).*/\1/p' include/tzr.h)
VERSION := $(call tzr_version_part,MAJOR).$(call tzr_version_part,MINOR).$(call tzr_version_part,PATCH)
SOVER := $(call tzr_version_part,MAJOR)
LIB_SRCS := $(wildcard src/*/*.c)
LIB_OBJS := $(LIB_SRCS:src/%.c=$(BUILD)/obj/%.o)
TOOL_COMMON := $(wildcard tools/common/*.c)
TOOL_COMMON_OBJS := $(TOOL_COMMON:tools/common/%.c=$(BUILD)/obj/tools_common_%.o)
TOOLS := $(notdir $(basename $(wildcard tools/*.c)))
TOOL_BINS := $(TOOLS:%=$(BUILD)/%)
TEST_SRCS := $(wildcard tests/test_*.c)
TEST_BINS := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
TEST_UTIL := $(wildcard tests/util/*.c)
FUZZ_SRCS := $(wildcard fuzz/fuzz_*.c)
FUZZ_REPLAY := $(FUZZ_SRCS:fuzz/%.c=$(BUILD)/fuzz/%_replay)

.PHONY: all deps test test-run demo demo-run bench bench-s3 install clean asan ubsan tsan fuzz check-deps
all: $(BUILD)/.deps $(BUILD)/libtzr.a $(BUILD)/libtzr.so $(TOOL_BINS) $(BUILD)/libtzr.pc

# Installs (as root) or names the missing Debian packages; only these
# targets run it.
deps:
	@bash scripts/deps.sh test

# A check, never an installation: the build packages are there.
$(BUILD)/.deps:
	@pkg-config --exists $(PKGS) || { echo "missing build packages ($(PKGS)): run make deps" >&2; exit 1; }
	@mkdir -p $(BUILD)
	@touch $@

# Headers as prerequisites come from the compiler (-MMD -MP), one .d per object.
$(BUILD)/obj/%.o: src/%.c | $(BUILD)/.deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# Built only through the tool pattern rule, so make would call them
# intermediate and remove them after the build (an `rm` as make test's last line).
.SECONDARY: $(TOOL_COMMON_OBJS)
$(BUILD)/obj/tools_common_%.o: tools/common/%.c | $(BUILD)/.deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -Itools/common -c $< -o $@
-include $(LIB_OBJS:.o=.d) $(TOOL_COMMON_OBJS:.o=.d)

$(BUILD)/libtzr.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

# src/libtzr.map: only the symbols it lists leave the shared library
# (whatever the compiler's visibility), one version node per release.
$(BUILD)/libtzr.so: $(LIB_OBJS) src/libtzr.map
	$(CC) -shared -Wl,-soname,libtzr.so.$(SOVER) -Wl,--version-script=src/libtzr.map $(LDFLAGS) \
	  -o $(BUILD)/libtzr.so.$(SOVER) $(LIB_OBJS) $(LIBS)
	ln -sf libtzr.so.$(SOVER) $@

$(BUILD)/%: tools/%.c $(TOOL_COMMON_OBJS) $(BUILD)/libtzr.a
	$(CC) $(CFLAGS) -Itools/common $< $(TOOL_COMMON_OBJS) $(BUILD)/libtzr.a $(LDFLAGS) $(LIBS) -o $@

$(BUILD)/tests/%: tests/%.c $(TEST_UTIL) $(wildcard tests/util/*.h) $(BUILD)/libtzr.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/util $< $(TEST_UTIL) $(BUILD)/libtzr.a $(LDFLAGS) $(LIBS) -o $@

# Fuzz targets build twice: a replay driver (any compiler, runs in make test)
# and a libFuzzer binary (clang) for `make fuzz`.
$(BUILD)/fuzz/%_replay: fuzz/%.c fuzz/replay_main.c $(BUILD)/libtzr.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< fuzz/replay_main.c $(BUILD)/libtzr.a $(LDFLAGS) $(LIBS) -o $@

$(BUILD)/libtzr.pc: Makefile include/tzr.h
	@mkdir -p $(BUILD)
	@printf 'prefix=%s\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\nName: libtzr\nDescription: read and write tensorizer .tensors checkpoints\nVersion: $(VERSION)\nRequires.private: %s\nLibs: -L$${libdir} -ltzr\nLibs.private: -lpthread -ldl -lm $(MPI_LIBS)\nCflags: -I$${includedir}\n' \
	  "$(PREFIX)" "$(PKGS)" > $@

# A fake CUDA runtime (host memory, asynchronous streams) for GPU-less tests.
$(BUILD)/tests/libfakecudart.so: tests/fake_cuda/fake_cudart.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fvisibility=default -shared -Wl,-soname,libfakecudart.so $< $(LDFLAGS) -lpthread -o $@
# A fake NCCL over MPI on the fake runtime's memory and streams (needs MPI).
$(BUILD)/tests/libfakenccl.so: tests/fake_cuda/fake_nccl.c $(BUILD)/tests/libfakecudart.so
	$(CC) $(CFLAGS) -fvisibility=default -shared $< -L$(BUILD)/tests -lfakecudart -Wl,-rpath,'$$ORIGIN' \
	  $(LDFLAGS) $(MPI_LIBS) -lpthread -o $@
FAKE_NCCL := $(if $(strip $(MPI_LIBS)),$(BUILD)/tests/libfakenccl.so)

# The GPU check program (tests/gpu/run.sh runs it; make test runs it on the fake).
$(BUILD)/tests/gpu_load: tests/gpu/gpu_load.c $(TEST_UTIL) $(BUILD)/libtzr.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/util $< $(TEST_UTIL) $(BUILD)/libtzr.a $(LDFLAGS) $(LIBS) -o $@

# test and demo install what they need first, then build in a fresh make
# (the pkg-config flags are read when a make starts).
test:
	@bash scripts/deps.sh test || true
	@$(MAKE) --no-print-directory test-run
test-run: all $(TEST_BINS) $(FUZZ_REPLAY) $(BUILD)/tests/libfakecudart.so $(FAKE_NCCL) $(BUILD)/tests/gpu_load
	@BUILD=$(BUILD) bash tests/run.sh

asan:
	$(MAKE) BUILD=build-asan CC=clang OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" test
ubsan:
	$(MAKE) BUILD=build-ubsan CC=clang OPT=-O1 SAN="-fsanitize=undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" test
# tests/tsan.supp: Open MPI internals only (uninstrumented), reached by the fake NCCL.
tsan:
	TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp $$TSAN_OPTIONS" \
	  $(MAKE) BUILD=build-tsan CC=clang OPT=-O1 SAN="-fsanitize=thread" test

fuzz: $(BUILD)/libtzr.a
	@mkdir -p $(BUILD)/fuzz
	for f in $(FUZZ_SRCS); do n=$$(basename $$f .c); \
	  clang $(CFLAGS_BASE) $(PKG_CFLAGS) -fsanitize=fuzzer,address,undefined $$f src/*/*.c $(LIBS) -o $(BUILD)/fuzz/$$n || exit 1; \
	  mkdir -p $(BUILD)/fuzz/$$n.work; \
	  $(BUILD)/fuzz/$$n -max_total_time=$${FUZZ_SECONDS:-60} $(BUILD)/fuzz/$$n.work fuzz/corpus/$$n || exit 1; done

demo:
	@bash scripts/deps.sh build
	@$(MAKE) --no-print-directory demo-run
demo-run: all
	@bash scripts/demo.sh $(BUILD)

bench: all
	@$(BUILD)/tzr-bench $(BENCH_ARGS)

bench-s3: all
	@bash scripts/bench_s3.sh $(BUILD)

install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/*.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libtzr.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libtzr.so.$(SOVER) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libtzr.so.$(SOVER) $(DESTDIR)$(PREFIX)/lib/libtzr.so
	sed 's|^prefix=.*|prefix=$(PREFIX)|' $(BUILD)/libtzr.pc > $(DESTDIR)$(PREFIX)/lib/pkgconfig/libtzr.pc
	install -m 755 $(TOOL_BINS) $(DESTDIR)$(PREFIX)/bin/
	for d in tzr tzr/distributed tzr/compat tzr/compat/tensorizer tzr/compat/tensorizer/_crypt; do \
	    install -d $(DESTDIR)$(PYTHON_DIR)/$$d && install -m 644 python/$$d/*.py $(DESTDIR)$(PYTHON_DIR)/$$d/ || exit 1; \
	done

# The Python package goes where Debian's python3 looks; it finds
# $(PREFIX)/lib/libtzr.so.0 relative to itself.
PYTHON_DIR ?= $(PREFIX)/lib/python3/dist-packages

# C host load against tzr.TensorDeserializer on one ~1 GiB file.
.PHONY: bench-python
bench-python: all
	@PYTHONPATH=python /usr/bin/python3 python/bench_load.py $(BUILD) $(BENCH_PY_ARGS)

clean:
	rm -rf build build-asan build-ubsan build-tsan
