/* core.c: aclInit/aclFinalize, devices, the recent-error message and the thread's last error, the
 * fault/poison state machine, the exception callback and its getters, and env parsing. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "aclsim.h"

struct sim_config sim_cfg;

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool inited;
static atomic_bool finalized; /* aclFinalize ran and no aclInit since: a call now uses a runtime that ended */
static atomic_int cur_device = -1;       /* process default, set by aclrtSetDevice */
static __thread int thread_device = -1;  /* the calling thread's own choice */

/* ---- time and ids ---- */
uint64_t sim_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

pid_t sim_gettid(void) { return (pid_t)syscall(SYS_gettid); }

int32_t sim_device(void) {
  int d = thread_device >= 0 ? thread_device : atomic_load(&cur_device);
  return d < 0 ? 0 : d;
}

/* ---- recent error message ---- */
static pthread_mutex_t msg_mu = PTHREAD_MUTEX_INITIALIZER;
static char *msg_text;              /* NULL: no error recorded */
static __thread char *msg_copy;     /* the reader's stable copy */

static void set_msg(const char *text, bool keep_fault) {
  pthread_mutex_lock(&msg_mu);
  /* A fault report stays the recent message: the 507899 that follow add nothing. */
  if (!(keep_fault && sim_poisoned() && msg_text)) {
    free(msg_text);
    msg_text = strdup(text);
  }
  pthread_mutex_unlock(&msg_mu);
}

/* The calling thread's last error, for aclrtGetLastError: every failure the emulator returns passes
 * through note_error. */
static __thread aclError last_error;

static aclError note_error(aclError code) {
  if (code) last_error = code;
  return code;
}

ACLSIM_INTERNAL aclError aclsim_internal_fail(aclError code, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = snprintf(buf, sizeof buf, "EE%d: ", code);
  vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
  va_end(ap);
  set_msg(buf, true);
  return note_error(code);
}

ACL_FUNC_VISIBILITY aclError aclrtGetLastError(aclrtLastErrLevel level) {
  if (level != ACL_RT_THREAD_LEVEL)
    return sim_fail(ACL_ERROR_INVALID_PARAM, "aclrtGetLastError: invalid level %d", (int)level);
  aclError rc = last_error;
  last_error = ACL_SUCCESS;
  return rc;
}

ACL_FUNC_VISIBILITY const char *aclGetRecentErrMsg(void) {
  pthread_mutex_lock(&msg_mu);
  const char *out = NULL;
  if (msg_text) {
    free(msg_copy);
    msg_copy = strdup(msg_text);
    out = msg_copy;
  }
  pthread_mutex_unlock(&msg_mu);
  return out;
}

/* ---- faults ---- */
struct aclrtExceptionInfo {
  uint32_t task_id, stream_id, thread_id, device_id, error_code;
};

static pthread_mutex_t fault_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool faulted;     /* a task faulted: workers drop everything from now on */
static atomic_bool host_aware;  /* a wait returned the fault: every later call gets 507899 */
static bool fault_delivered;    /* the faulting stream's own sync has returned the fault code */
static uint32_t fault_stream;
static aclError fault_code;
static _Atomic(aclrtExceptionInfoCallback) exc_cb;

bool sim_poisoned(void) { return atomic_load(&faulted); }

static void log_line(const char *line) {
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  localtime_r(&ts.tv_sec, &tm);
  fprintf(stderr, "[ERROR] RUNTIME(%d,%s):%04d-%02d-%02d-%02d:%02d:%02d.%03ld.%03ld [aclsim.c:1]%d FaultReport:%s\n",
          (int)getpid(), program_invocation_short_name, tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
          tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, (ts.tv_nsec / 1000) % 1000, (int)sim_gettid(), line);
}

void sim_fault_raise(const struct sim_fault *f) {
  pthread_mutex_lock(&fault_mu);
  if (atomic_load(&faulted)) {
    pthread_mutex_unlock(&fault_mu);
    return;
  }
  fault_stream = f->stream_id;
  fault_code = f->code;
  fault_delivered = false;
  pthread_mutex_lock(&msg_mu);
  free(msg_text);
  msg_text = strdup(f->lines);
  pthread_mutex_unlock(&msg_mu);
  atomic_store(&faulted, true);
  pthread_mutex_unlock(&fault_mu);

  /* One device-log block per fault, each line prefixed like the runtime's own log. */
  char *copy = strdup(f->lines);
  if (copy) {
    char *save = NULL;
    for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) log_line(l);
    free(copy);
  }
  fflush(stderr);

  aclrtExceptionInfoCallback cb = atomic_load(&exc_cb);
  if (cb) {
    struct aclrtExceptionInfo info = {f->task_id, f->stream_id, f->thread_id, (uint32_t)sim_device(),
                                      (uint32_t)f->code};
    cb(&info);
  }
}

aclError sim_wait_result(uint32_t stream_id) {
  if (!atomic_load(&faulted)) return ACL_SUCCESS;
  pthread_mutex_lock(&fault_mu);
  aclError rc = ACL_ERROR_RT_DRV_INTERNAL_ERROR;
  if (!fault_delivered && (stream_id == fault_stream || stream_id == UINT32_MAX - 1)) {
    fault_delivered = true;
    rc = fault_code;
  }
  atomic_store(&host_aware, true);
  pthread_mutex_unlock(&fault_mu);
  return note_error(rc);
}

void sim_fault_reset(void) {
  pthread_mutex_lock(&fault_mu);
  atomic_store(&faulted, false);
  atomic_store(&host_aware, false);
  fault_delivered = false;
  pthread_mutex_unlock(&fault_mu);
  pthread_mutex_lock(&msg_mu);
  free(msg_text);
  msg_text = NULL;
  pthread_mutex_unlock(&msg_mu);
}

bool sim_initialized(void) { return atomic_load(&inited); }

ACLSIM_INTERNAL aclError aclsim_internal_check(void) {
  if (!atomic_load(&inited)) {
    /* The real runtime's handles are gone after aclFinalize: a call then is undefined there, so the
     * checker names it (the hazards line was already printed by aclFinalize). */
    if (sim_cfg.check_hazards && atomic_load(&finalized)) {
      fprintf(stderr, "aclsim: hazard: a runtime call after aclFinalize\n");
      fflush(stderr);
    }
    return sim_fail(ACL_ERROR_UNINITIALIZE, "acl is not initialized, call aclInit first");
  }
  if (atomic_load(&host_aware)) return note_error(ACL_ERROR_RT_DRV_INTERNAL_ERROR);
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclError aclrtSetExceptionInfoCallback(aclrtExceptionInfoCallback callback) {
  aclError rc = sim_check();
  if (rc) return rc;
  atomic_store(&exc_cb, callback);
  return ACL_SUCCESS;
}

#define GETTER(name, field)                                                   \
  ACL_FUNC_VISIBILITY uint32_t name(const aclrtExceptionInfo *info) {         \
    return info ? info->field : 0xFFFFFFFFu;                                  \
  }
GETTER(aclrtGetTaskIdFromExceptionInfo, task_id)
GETTER(aclrtGetStreamIdFromExceptionInfo, stream_id)
GETTER(aclrtGetThreadIdFromExceptionInfo, thread_id)
GETTER(aclrtGetDeviceIdFromExceptionInfo, device_id)
GETTER(aclrtGetErrorCodeFromExceptionInfo, error_code)

/* ---- env ---- */
/* parse_size reads "8589934592", "8G", "512M", "64K" (binary units); false on junk. */
static bool parse_size(const char *s, size_t *out) {
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s || errno) return false;
  unsigned long long mul = 1;
  switch (*end) {
    case 'k': case 'K': mul = 1ull << 10; end++; break;
    case 'm': case 'M': mul = 1ull << 20; end++; break;
    case 'g': case 'G': mul = 1ull << 30; end++; break;
    case 't': case 'T': mul = 1ull << 40; end++; break;
    default: break;
  }
  if (*end == 'i' || *end == 'B' || *end == 'b') end++; /* accept 8GiB / 8GB / 8Gb as 8 GiB */
  if (*end == 'B') end++;
  if (*end != '\0' || v == 0 || v > (1ull << 50) / mul) return false;
  *out = (size_t)(v * mul);
  return true;
}

static void load_config(void) {
  sim_cfg.device_mem = 8 * SIM_GIB;
  sim_cfg.copy_gbps = 0;
  sim_cfg.device_count = 8;
  sim_cfg.check_hazards = false;
  sim_cfg.jitter_us = 0;
  sim_cfg.seed = 1;
  const char *v = getenv("ACLSIM_DEVICE_MEM");
  if (v && *v && !parse_size(v, &sim_cfg.device_mem))
    fprintf(stderr, "aclsim: ignoring bad ACLSIM_DEVICE_MEM=%s (want bytes with optional K/M/G)\n", v);
  sim_cfg.quarantine = sim_cfg.device_mem;
  v = getenv("ACLSIM_QUARANTINE");
  if (v && *v) {
    size_t q;
    if (strcmp(v, "0") == 0) sim_cfg.quarantine = 0;
    else if (parse_size(v, &q)) sim_cfg.quarantine = q;
    else fprintf(stderr, "aclsim: ignoring bad ACLSIM_QUARANTINE=%s\n", v);
  }
  v = getenv("ACLSIM_COPY_GBPS");
  if (v && *v) {
    char *end;
    double g = strtod(v, &end);
    if (end != v && *end == '\0' && g >= 0 && g < 1e6) sim_cfg.copy_gbps = g;
    else fprintf(stderr, "aclsim: ignoring bad ACLSIM_COPY_GBPS=%s (want GB/s, e.g. 25)\n", v);
  }
  v = getenv("ACLSIM_DEVICE_COUNT");
  if (v && *v) {
    char *end;
    long n = strtol(v, &end, 10);
    if (end != v && *end == '\0' && n >= 1 && n <= 64) sim_cfg.device_count = (uint32_t)n;
    else fprintf(stderr, "aclsim: ignoring bad ACLSIM_DEVICE_COUNT=%s\n", v);
  }
  v = getenv("ACLSIM_CHECK_HAZARDS");
  if (v && *v) {
    if (strcmp(v, "0") == 0 || strcmp(v, "1") == 0) sim_cfg.check_hazards = *v == '1';
    else fprintf(stderr, "aclsim: ignoring bad ACLSIM_CHECK_HAZARDS=%s (want 0 or 1)\n", v);
  }
  v = getenv("ACLSIM_JITTER_US");
  if (v && *v) {
    char *end;
    errno = 0;
    unsigned long us = strtoul(v, &end, 10);
    if (end != v && *end == '\0' && !errno && *v != '-' && us <= 1000000) sim_cfg.jitter_us = (uint32_t)us;
    else fprintf(stderr, "aclsim: ignoring bad ACLSIM_JITTER_US=%s (want 0..1000000)\n", v);
  }
  v = getenv("ACLSIM_SEED");
  if (v && *v) {
    char *end;
    errno = 0;
    unsigned long long seed = strtoull(v, &end, 0);
    if (end != v && *end == '\0' && !errno && *v != '-') sim_cfg.seed = seed;
    else fprintf(stderr, "aclsim: ignoring bad ACLSIM_SEED=%s\n", v);
  }
}

/* ---- init / device ---- */
ACL_FUNC_VISIBILITY aclError aclInit(const char *configPath) {
  (void)configPath; /* the JSON config only tunes logging/dump on hardware */
  pthread_mutex_lock(&init_mu);
  if (atomic_load(&inited)) {
    pthread_mutex_unlock(&init_mu);
    return sim_fail(ACL_ERROR_REPEAT_INITIALIZE, "aclInit: repeated initialization");
  }
  load_config();
  sim_fault_reset();
  if (sim_mem_init(sim_cfg.device_mem, sim_cfg.quarantine) != 0) {
    pthread_mutex_unlock(&init_mu);
    return sim_fail(ACL_ERROR_BAD_ALLOC, "aclInit: cannot reserve %zu bytes of device address space",
                    sim_cfg.device_mem);
  }
  if (sim_streams_init() != 0) {
    sim_mem_fini();
    pthread_mutex_unlock(&init_mu);
    return sim_fail(ACL_ERROR_INTERNAL_ERROR, "aclInit: cannot start the default stream");
  }
  atomic_store(&inited, true);
  atomic_store(&finalized, false);
  pthread_mutex_unlock(&init_mu);
  return ACL_SUCCESS;
}

/* aclFinalize tears everything down (streams joined, device and pinned memory unmapped, fault state
 * cleared), so a later aclInit starts from a clean runtime that re-reads the environment. */
ACL_FUNC_VISIBILITY aclError aclFinalize(void) {
  pthread_mutex_lock(&init_mu);
  if (!atomic_load(&inited)) {
    pthread_mutex_unlock(&init_mu);
    return sim_fail(ACL_ERROR_UNINITIALIZE, "aclFinalize: acl is not initialized");
  }
  atomic_store(&inited, false);
  atomic_store(&finalized, true);
  sim_streams_fini();
  if (sim_cfg.check_hazards) {
    fprintf(stderr, "aclsim: hazards: %llu\n", (unsigned long long)sim_hz_count());
    fflush(stderr);
  }
  sim_hz_reset();
  sim_vmm_fini();
  sim_mem_fini();
  atomic_store(&exc_cb, NULL);
  atomic_store(&cur_device, -1);
  sim_fault_reset();
  pthread_mutex_unlock(&init_mu);
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclError aclrtSetDevice(int32_t deviceId) {
  aclError rc = sim_check();
  if (rc) return rc;
  if (deviceId < 0 || (uint32_t)deviceId >= sim_cfg.device_count)
    return sim_fail(ACL_ERROR_RT_INVALID_DEVICEID, "aclrtSetDevice: invalid device id %d (count %u)", deviceId,
                    sim_cfg.device_count);
  thread_device = deviceId;
  atomic_store(&cur_device, deviceId);
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclError aclrtResetDevice(int32_t deviceId) {
  aclError rc = sim_check();
  if (rc) return rc;
  if (deviceId < 0 || (uint32_t)deviceId >= sim_cfg.device_count)
    return sim_fail(ACL_ERROR_RT_INVALID_DEVICEID, "aclrtResetDevice: invalid device id %d", deviceId);
  return sim_sync_all(SIM_FOREVER);
}

ACL_FUNC_VISIBILITY aclError aclrtGetDevice(int32_t *deviceId) {
  aclError rc = sim_check();
  if (rc) return rc;
  if (!deviceId) return sim_fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDevice: deviceId is NULL");
  int d = thread_device >= 0 ? thread_device : atomic_load(&cur_device);
  if (d < 0) return sim_fail(ACL_ERROR_RT_CONTEXT_NULL, "aclrtGetDevice: no device set");
  *deviceId = d;
  return ACL_SUCCESS;
}

ACL_FUNC_VISIBILITY aclError aclrtGetDeviceCount(uint32_t *count) {
  aclError rc = sim_check();
  if (rc) return rc;
  if (!count) return sim_fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDeviceCount: count is NULL");
  *count = sim_cfg.device_count;
  return ACL_SUCCESS;
}
