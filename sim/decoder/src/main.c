/* main.c: decoder-sim's command line, runtime setup and step loop. Prints `step I/K: loss X, grad_norm Y`
 * per step and `calls <function> <count>` for every AscendCL function called; exits 0, 1 when a runtime
 * call fails (named, with the runtime's message), 2 on a bad flag. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model.h"
#include "ops.h"
#include "rt.h"
#include "swap.h"

static const char usage[] =
    "usage: decoder-sim [flags]\n"
    "  --layers N          decoder layers (12)\n"
    "  --swap-layers SET   layers wrapped for swap when the agent is present: \"0-10\", \"0,2,4\", \"1-3,7\",\n"
    "                      \"all\" or \"none\" (0-10)\n"
    "  --steps K           training steps (10)\n"
    "  --seq S             sequence length (4096)\n"
    "  --rope-dim R        rotary dimension, even; each cos/sin tensor is S*R*4 bytes (64)\n"
    "  --hidden H          hidden size (8)\n"
    "  --ffn F             MLP width (2*hidden)\n"
    "  --lr LR             SGD learning rate (0.1)\n"
    "  --link MODE         direct | dlsym: how the runtime is reached (direct)\n"
    "  --sync MODE         op | layer | step: the host waits for the streams after every kernel, also at\n"
    "                      layer ends, or only where it reads the loss and the gradient norm (op)\n"
    "  --streams N         1 | 2: with 2 the MLP half of each layer runs on a second stream (1)\n"
    "  --seed N            seed of weights and data (1)\n"
    "  --alloc MODE        malloc | vmm: the pool grows with aclrtMalloc, or (MindSpore on 910B) maps 2 MiB\n"
    "                      physical chunks into one reserved address range and unmaps free ones each step\n"
    "                      (malloc)\n"
    "  --vmm-reserve SIZE  bytes reserved with --alloc vmm, suffix K/M/G/T allowed (from the model size)\n"
    "  --launch MODE       inline | thread: kernels are launched by the main thread, or (MindSpore) by a\n"
    "                      launch thread fed through a queue (inline)\n"
    "  --executor-cache M  off | on: on keeps repeatable executors in an LRU keyed by op and tensor shapes\n"
    "                      and re-points their tensors with aclSetTensorAddr (MindSpore PyBoost) (off)\n"
    "  --executor-cache-size N  LRU capacity with --executor-cache on (1024)\n"
    "  --help              this text\n";

static _Noreturn void bad(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "decoder-sim: ");
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, " (see --help)\n");
  exit(2);
}

static long long parse_int(const char *flag, const char *v, long long lo, long long hi) {
  char *end = NULL;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (v[0] == '\0' || *end != '\0' || errno != 0 || n < lo || n > hi) {
    char range[64];
    snprintf(range, sizeof range, "%lld..%lld", lo, hi);
    fprintf(stderr, "decoder-sim: %s: bad value \"%s\" (want an integer in %s)\n", flag, v, range);
    exit(2);
  }
  return n;
}

/* parse_size reads a byte count with an optional binary suffix K, M, G or T. */
static size_t parse_size(const char *flag, const char *v) {
  char *end = NULL;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  int shift = 0;
  if (end != NULL && *end != '\0' && end[1] == '\0') {
    const char *units = "KMGT";
    const char *u = strchr(units, *end);
    if (u != NULL) {
      shift = 10 * (int)(u - units + 1);
      end++;
    }
  }
  if (v[0] < '0' || v[0] > '9' || *end != '\0' || errno != 0 || n == 0 || n > (1ull << 50) >> shift) {
    fprintf(stderr, "decoder-sim: %s: bad value \"%s\" (want a byte count, optional suffix K, M, G or T, up to 1024T)\n",
            flag, v);
    exit(2);
  }
  return (size_t)(n << shift);
}

/* vmm_budget is the default --vmm-reserve: twice a generous bound on what the pool ever holds (fixed
 * tensors, weights and their gradients, cos/sin, every layer's saved activations, one layer's temporaries),
 * plus 64 MiB, so fragmentation and a swap agent's restores to new addresses fit. */
static size_t vmm_budget(const model_config *c) {
  const size_t S = (size_t)c->seq, H = (size_t)c->hidden, R = (size_t)c->rope_dim, F = (size_t)c->ffn;
  const size_t L = (size_t)c->layers;
#define R512(n) (((n) * sizeof(float) + 511) / 512 * 512)
  size_t weights = 2 * R512(H * R) + R512(R * H) + 2 * R512(H * F) + R512(F * H);
  size_t fixed = 2 * L * weights + 2 * R512(S * H) + R512(R * R) + R512(H) + 2 * R512(S * R);
  size_t saved = 2 * R512(H * R) + 3 * R512(S * R) + 2 * R512(S * H) + 3 * R512(S * F);
  size_t temp = 12 * R512(S * R) + 8 * R512(S * H) + 8 * R512(S * F);
#undef R512
  return 2 * (fixed + L * saved + temp) + (64u << 20);
}

/* parse_layers fills swap[0..layers) from "none", "all" or a list of indices and ranges. */
static void parse_layers(const char *spec, int layers, unsigned char *swap) {
  memset(swap, 0, (size_t)layers);
  if (strcmp(spec, "none") == 0) return;
  if (strcmp(spec, "all") == 0) {
    memset(swap, 1, (size_t)layers);
    return;
  }
  const char *p = spec;
  for (;;) {
    char *end = NULL;
    if (*p < '0' || *p > '9') bad("--swap-layers: bad set \"%s\"%s", spec, "");
    long a = strtol(p, &end, 10), b = a;
    p = end;
    if (*p == '-') {
      p++;
      if (*p < '0' || *p > '9') bad("--swap-layers: bad set \"%s\"%s", spec, "");
      b = strtol(p, &end, 10);
      p = end;
    }
    if (a > b) bad("--swap-layers: bad range in \"%s\"%s", spec, "");
    if (b >= layers) {
      char n[32];
      snprintf(n, sizeof n, "%d", layers);
      bad("--swap-layers: \"%s\" names a layer beyond --layers %s", spec, n);
    }
    for (long i = a; i <= b; i++) swap[i] = 1;
    if (*p == '\0') return;
    if (*p != ',') bad("--swap-layers: bad set \"%s\"%s", spec, "");
    p++;
  }
}

static double clock_ms(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* on_exception prints the runtime's exception info as MindSpore's callback does. It runs on a runtime
 * thread: the getters are called straight through the table, outside the (single-threaded) call counts. */
static void on_exception(aclrtExceptionInfo *info) {
  fprintf(stderr, "decoder-sim: exception callback: task %u, stream %u, device %u, error code %u\n",
          rt_fns.aclrtGetTaskIdFromExceptionInfo(info), rt_fns.aclrtGetStreamIdFromExceptionInfo(info),
          rt_fns.aclrtGetDeviceIdFromExceptionInfo(info), rt_fns.aclrtGetErrorCodeFromExceptionInfo(info));
}

int main(int argc, char **argv) {
  model_config cfg = {.layers = 12, .seq = 4096, .hidden = 8, .rope_dim = 64, .ffn = 0, .seed = 1, .lr = 0.1f};
  long long steps = 10;
  const char *swap_spec = NULL;
  enum rt_link link = RT_LINK_DIRECT;
  enum ops_sync sync = OPS_SYNC_OP;
  int streams = 1;
  enum pool_mode alloc = POOL_MALLOC;
  size_t vmm_reserve = 0; /* 0: vmm_budget */
  enum ops_launch launch = OPS_LAUNCH_INLINE;
  int cache_on = 0;
  long long cache_size = OPS_CACHE_DEFAULT;
  int cache_size_given = 0;

  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      fputs(usage, stdout);
      return 0;
    }
    if (strncmp(arg, "--", 2) != 0) bad("unexpected argument \"%s\"%s", arg, "");
    char name[64];
    const char *val = NULL;
    const char *eq = strchr(arg, '=');
    if (eq != NULL) {
      size_t n = (size_t)(eq - arg);
      if (n >= sizeof name) bad("unknown flag \"%s\"%s", arg, "");
      memcpy(name, arg, n);
      name[n] = '\0';
      val = eq + 1;
    } else {
      snprintf(name, sizeof name, "%s", arg);
    }
    static const char *const known[] = {"--layers", "--swap-layers", "--steps", "--seq", "--rope-dim", "--hidden",
                                        "--ffn", "--lr", "--link", "--sync", "--streams", "--seed",
                                        "--alloc", "--vmm-reserve", "--launch", "--executor-cache",
                                        "--executor-cache-size"};
    int ok = 0;
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) ok |= strcmp(name, known[k]) == 0;
    if (!ok) bad("unknown flag \"%s\"%s", arg, "");
    if (val == NULL) {
      if (i + 1 >= argc) bad("%s needs a value%s", name, "");
      val = argv[++i];
    }
    if (strcmp(name, "--layers") == 0) cfg.layers = (int)parse_int(name, val, 1, 1024);
    else if (strcmp(name, "--swap-layers") == 0) swap_spec = val;
    else if (strcmp(name, "--steps") == 0) steps = parse_int(name, val, 1, 1000000);
    else if (strcmp(name, "--seq") == 0) cfg.seq = parse_int(name, val, 1, 1 << 20);
    else if (strcmp(name, "--rope-dim") == 0) cfg.rope_dim = parse_int(name, val, 2, 4096);
    else if (strcmp(name, "--hidden") == 0) cfg.hidden = parse_int(name, val, 1, 4096);
    else if (strcmp(name, "--ffn") == 0) cfg.ffn = parse_int(name, val, 1, 16384);
    else if (strcmp(name, "--streams") == 0) streams = (int)parse_int(name, val, 1, 2);
    else if (strcmp(name, "--seed") == 0) cfg.seed = (uint64_t)parse_int(name, val, 0, (long long)(~0ull >> 1));
    else if (strcmp(name, "--lr") == 0) {
      char *end = NULL;
      errno = 0;
      double lr = strtod(val, &end);
      if (val[0] == '\0' || *end != '\0' || errno != 0 || !(lr >= 0 && lr <= 10))
        bad("--lr: bad value \"%s\" (want a number in 0..10)%s", val, "");
      cfg.lr = (float)lr;
    } else if (strcmp(name, "--link") == 0) {
      if (strcmp(val, "direct") == 0) link = RT_LINK_DIRECT;
      else if (strcmp(val, "dlsym") == 0) link = RT_LINK_DLSYM;
      else bad("--link: bad value \"%s\" (want direct or dlsym)%s", val, "");
    } else if (strcmp(name, "--sync") == 0) {
      if (strcmp(val, "op") == 0) sync = OPS_SYNC_OP;
      else if (strcmp(val, "layer") == 0) sync = OPS_SYNC_LAYER;
      else if (strcmp(val, "step") == 0) sync = OPS_SYNC_STEP;
      else bad("--sync: bad value \"%s\" (want op, layer or step)%s", val, "");
    } else if (strcmp(name, "--alloc") == 0) {
      if (strcmp(val, "malloc") == 0) alloc = POOL_MALLOC;
      else if (strcmp(val, "vmm") == 0) alloc = POOL_VMM;
      else bad("--alloc: bad value \"%s\" (want malloc or vmm)%s", val, "");
    } else if (strcmp(name, "--vmm-reserve") == 0) {
      vmm_reserve = parse_size(name, val);
    } else if (strcmp(name, "--launch") == 0) {
      if (strcmp(val, "inline") == 0) launch = OPS_LAUNCH_INLINE;
      else if (strcmp(val, "thread") == 0) launch = OPS_LAUNCH_THREAD;
      else bad("--launch: bad value \"%s\" (want inline or thread)%s", val, "");
    } else if (strcmp(name, "--executor-cache") == 0) {
      if (strcmp(val, "off") == 0) cache_on = 0;
      else if (strcmp(val, "on") == 0) cache_on = 1;
      else bad("--executor-cache: bad value \"%s\" (want on or off)%s", val, "");
    } else if (strcmp(name, "--executor-cache-size") == 0) {
      cache_size = parse_int(name, val, 1, 1 << 20);
      cache_size_given = 1;
    }
  }
  if (vmm_reserve != 0 && alloc != POOL_VMM) bad("--vmm-reserve needs --alloc vmm%s%s", "", "");
  if (cache_size_given && !cache_on) bad("--executor-cache-size needs --executor-cache on%s%s", "", "");
  if (cfg.rope_dim % 2 != 0) bad("--rope-dim: must be even, got %s%s", "odd", "");
  if (cfg.ffn == 0) cfg.ffn = 2 * cfg.hidden;
  unsigned char *swap = calloc((size_t)cfg.layers, 1);
  if (swap == NULL) return 1;
  if (swap_spec != NULL) {
    parse_layers(swap_spec, cfg.layers, swap);
  } else {
    for (int i = 0; i <= 10 && i < cfg.layers; i++) swap[i] = 1; /* the layers 0-10 */
  }
  cfg.swap = swap;

  rt_load(link);
  rt_check(RT(aclInit)(NULL), "aclInit", NULL);
  rt_check(RT(aclrtSetDevice)(0), "aclrtSetDevice", NULL);
  rt_check(RT(aclrtSetExceptionInfoCallback)(on_exception), "aclrtSetExceptionInfoCallback", NULL);
  ops_init(streams, sync, launch, cache_on ? (size_t)cache_size : 0);
  pool_init(alloc, vmm_reserve != 0 ? vmm_reserve : vmm_budget(&cfg));

  static model m;
  int agent = swap_init(&m);
  char alloc_desc[64], cache_desc[48];
  if (alloc == POOL_VMM)
    snprintf(alloc_desc, sizeof alloc_desc, "vmm (reserve %.1f MiB)", (double)pool_vmm_reserve_bytes() / (1 << 20));
  else
    snprintf(alloc_desc, sizeof alloc_desc, "malloc");
  if (cache_on) snprintf(cache_desc, sizeof cache_desc, "on (%lld)", cache_size);
  else snprintf(cache_desc, sizeof cache_desc, "off");
  fprintf(stderr,
          "decoder-sim: %d layers, seq %lld, rope-dim %lld, hidden %lld, ffn %lld, link %s, sync %s, streams %d, "
          "alloc %s, launch %s, executor cache %s, agent %s\n",
          cfg.layers, (long long)cfg.seq, (long long)cfg.rope_dim, (long long)cfg.hidden, (long long)cfg.ffn,
          link == RT_LINK_DLSYM ? "dlsym" : "direct", sync == OPS_SYNC_OP ? "op" : sync == OPS_SYNC_LAYER ? "layer" : "step",
          streams, alloc_desc, launch == OPS_LAUNCH_THREAD ? "thread" : "inline", cache_desc,
          agent ? "present" : "absent (no swap)");
  if (ops_events_off())
    fprintf(stderr, "decoder-sim: DECODER_SIM_TEST_NO_EVENTS=1: the two streams are NOT ordered (test only)\n");
  model_init(&m, &cfg); /* synchronous copies only: nothing is queued when it returns */

  double t0 = clock_ms(CLOCK_MONOTONIC), c0 = clock_ms(CLOCK_PROCESS_CPUTIME_ID), first = 0;
  for (long long s = 1; s <= steps; s++) {
    double loss = 0, gnorm = 0, ts = clock_ms(CLOCK_MONOTONIC);
    model_step(&m, &loss, &gnorm);
    if (s == 1) first = clock_ms(CLOCK_MONOTONIC) - ts;
    printf("step %lld/%lld: loss %.10e, grad_norm %.10e\n", s, steps, loss, gnorm);
    fflush(stdout);
  }
  ops_sync(); /* the last update, before the timing and before the pool's memory is freed */
  double total = clock_ms(CLOCK_MONOTONIC) - t0, cpu = clock_ms(CLOCK_PROCESS_CPUTIME_ID) - c0;
  size_t peak = pool_peak_bytes(), reserved = pool_reserved_bytes(), device_peak = pool_device_peak_bytes();

  model_free(&m);
  pool_release_all();
  ops_fini();
  rt_check(RT(aclrtResetDevice)(0), "aclrtResetDevice", NULL);
  rt_check(RT(aclFinalize)(), "aclFinalize", NULL);
  rt_print_calls();
  fprintf(stderr,
          "decoder-sim: %lld steps in %.1f ms: %.2f ms/step (first %.2f ms), cpu %.2f ms/step; pool peak %.1f MiB "
          "of %.1f MiB reserved; %s peak %zu bytes (%.1f MiB)\n",
          steps, total, total / (double)steps, first, cpu / (double)steps, (double)peak / (1 << 20),
          (double)reserved / (1 << 20), alloc == POOL_VMM ? "mapped" : "malloc", device_peak,
          (double)device_peak / (1 << 20));
  ops_cache_summary();
  swap_summary();
  free(swap);
  return 0;
}
