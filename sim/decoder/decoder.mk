# sim/decoder/decoder.mk: builds build/bin/decoder-sim (the DeepSeek-V3-shaped workload on the emulated
# AscendCL runtime) and its bench. Linked directly against the emulator with a RUNPATH, so LD_LIBRARY_PATH can
# point it at a real toolkit instead.
DECODER_SRCS := $(sort $(wildcard sim/decoder/src/*.c))
DECODER_HDRS := $(sort $(wildcard sim/decoder/src/*.h))
DECODER_BIN := $(BUILD)/bin/decoder-sim

BUILD_TARGETS += $(DECODER_BIN)
BENCHES += bench-decoder

$(DECODER_BIN): $(DECODER_SRCS) $(DECODER_HDRS) $(ACL_HDRS) shim/c/swapagent.h $(ASCEND)/lib64/libopapi.so
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I$(ACL_INC) -Ishim/c -o $@ $(DECODER_SRCS) -L$(ASCEND)/lib64 -lopapi -lnnopbase -lascendcl \
		-Wl,-rpath,'$$ORIGIN/../ascend/latest/lib64' -Wl,--enable-new-dtags -ldl -lm -lpthread

# bench-decoder: wall and CPU ms per training step of the default 12-layer stack (5 steps, no agent), with
# the stream synchronized per op (the default) and per layer.
.PHONY: bench-decoder
bench-decoder: $(DECODER_BIN)
	@set -e; for mode in op layer; do \
		line=$$($(DECODER_BIN) --steps 5 --sync $$mode 2>&1 >/dev/null | grep 'ms/step'); \
		wall=$$(sed -E 's/.*: ([0-9.]+) ms\/step.*/\1/' <<<"$$line"); \
		cpu=$$(sed -E 's/.*cpu ([0-9.]+) ms\/step.*/\1/' <<<"$$line"); \
		echo "decoder-sim: $$wall ms/step wall, $$cpu ms/step cpu (12 layers, seq 4096, rope-dim 64, hidden 8, 5 steps, sync per $$mode)"; \
	done
