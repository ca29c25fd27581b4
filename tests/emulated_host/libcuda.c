/* An emulated libcuda.so.1 for tests: the driver API functions pytest-gputopo's probe child calls
 * (probe/cuda_driver.py), with their cuda.h signatures, serving the devices a text file describes.
 *
 * $GPUTOPO_EMU_CUDA names the file, one fact per line:
 *   init <CUresult> <milliseconds>   what cuInit returns, after how long (CUDA's start-up costs seconds)
 *   dev <PCI bus id> <multicast 0|1|-1>   one device per line, in CUDA's order (-1: the attribute query fails)
 *   nopeer <ordinal> <ordinal>       cuDeviceCanAccessPeer answers 0 for this ordered pair (default 1)
 *   uuid <ordinal> <GPU-uuid>        the device's UUID, which CUDA_VISIBLE_DEVICES may name
 * CUDA_VISIBLE_DEVICES is applied as CUDA applies it (CUDA C++ Programming Guide, "CUDA Environment
 * Variables"): indices or GPU UUIDs (a unique prefix), the list ending at the first entry that names
 * no device (here: a MIG id too, or a device listed twice); the devices left are renumbered from 0.
 * $GPUTOPO_EMU_CALLS, when set, names a file each call appends "<pid> <function>" to, so that a test
 * can say which process started CUDA. Built without -DNO_MULTICAST_CREATE it also exports
 * cuMulticastCreate (CUDA 12.1+), whose presence NCCL and the probe take as the driver's support. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_DEVICES 64
static int loaded = 0, init_result = 0, init_ms = 0, initialised = 0, count = 0;
static char buses[MAX_DEVICES][32];
static int multicast[MAX_DEVICES];
static unsigned char nopeer[MAX_DEVICES][MAX_DEVICES];
static char uuids[MAX_DEVICES][64];

static void record(const char *fn) {
    const char *path = getenv("GPUTOPO_EMU_CALLS");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%d %s\n", (int)getpid(), fn);
    fclose(f);
}

/* The ordinal an entry of CUDA_VISIBLE_DEVICES names, or -1. */
static int named(const char *entry) {
    char *end;
    long i = strtol(entry, &end, 10);
    if (*entry && *end == 0) return i >= 0 && i < count ? (int)i : -1;
    if (strncmp(entry, "GPU-", 4)) return -1;
    int hit = -1;
    for (int d = 0; d < count; d++)
        if (uuids[d][0] && !strncmp(uuids[d], entry, strlen(entry))) { if (hit >= 0) return -1; hit = d; }
    return hit;
}

static void apply_visible(void) {
    const char *env = getenv("CUDA_VISIBLE_DEVICES");
    if (!env) return;
    char list[1024], *save = NULL;
    snprintf(list, sizeof list, "%s", env);
    int keep[MAX_DEVICES], n = 0;
    for (char *e = strtok_r(list, ",", &save); e && n < MAX_DEVICES; e = strtok_r(NULL, ",", &save)) {
        while (*e == ' ') e++;
        int d = named(e), twice = 0;
        for (int k = 0; k < n; k++) twice |= keep[k] == d;
        if (d < 0 || twice) break;
        keep[n++] = d;
    }
    char b2[MAX_DEVICES][32], u2[MAX_DEVICES][64];
    int m2[MAX_DEVICES];
    unsigned char p2[MAX_DEVICES][MAX_DEVICES];
    for (int i = 0; i < n; i++) {
        strcpy(b2[i], buses[keep[i]]); strcpy(u2[i], uuids[keep[i]]); m2[i] = multicast[keep[i]];
        for (int j = 0; j < n; j++) p2[i][j] = nopeer[keep[i]][keep[j]];
    }
    for (int i = 0; i < n; i++) {
        strcpy(buses[i], b2[i]); strcpy(uuids[i], u2[i]); multicast[i] = m2[i];
        for (int j = 0; j < n; j++) nopeer[i][j] = p2[i][j];
    }
    count = n;
}

static void load(void) {
    if (loaded) return;
    loaded = 1;
    const char *path = getenv("GPUTOPO_EMU_CUDA");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) { init_result = 100; return; }  /* CUDA_ERROR_NO_DEVICE */
    char word[16], bus[32];
    int a, b;
    while (fscanf(f, "%15s", word) == 1) {
        if (!strcmp(word, "init") && fscanf(f, "%d %d", &a, &b) == 2) { init_result = a; init_ms = b; }
        else if (!strcmp(word, "dev") && count < MAX_DEVICES && fscanf(f, "%31s %d", bus, &a) == 2) {
            strcpy(buses[count], bus); multicast[count] = a; count++;
        } else if (!strcmp(word, "nopeer") && fscanf(f, "%d %d", &a, &b) == 2 && a >= 0 && b >= 0
                   && a < MAX_DEVICES && b < MAX_DEVICES) nopeer[a][b] = 1;
        else if (!strcmp(word, "uuid") && fscanf(f, "%d %63s", &a, bus) == 2 && a >= 0 && a < MAX_DEVICES)
            snprintf(uuids[a], sizeof uuids[a], "%s", bus);
    }
    fclose(f);
    apply_visible();
}

int cuInit(unsigned int flags) {
    (void)flags;
    record("cuInit");
    load();
    struct timespec t = {init_ms / 1000, (long)(init_ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
    initialised = init_result == 0;
    return init_result;
}

int cuDeviceGetCount(int *n) {
    record("cuDeviceGetCount");
    if (!initialised) return 3;  /* CUDA_ERROR_NOT_INITIALIZED */
    *n = count;
    return 0;
}

int cuDeviceGet(int *device, int ordinal) {
    if (!initialised) return 3;
    if (ordinal < 0 || ordinal >= count) return 101;  /* CUDA_ERROR_INVALID_DEVICE */
    *device = ordinal;
    return 0;
}

int cuDeviceGetPCIBusId(char *buf, int len, int device) {
    if (!initialised) return 3;
    if (device < 0 || device >= count || len < 13) return 101;
    snprintf(buf, (size_t)len, "%s", buses[device]);
    return 0;
}

int cuDeviceCanAccessPeer(int *can, int device, int peer) {
    record("cuDeviceCanAccessPeer");
    if (!initialised) return 3;
    if (device < 0 || device >= count || peer < 0 || peer >= count) return 101;
    *can = device != peer && !nopeer[device][peer];
    return 0;
}

int cuDeviceGetAttribute(int *value, int attribute, int device) {
    if (!initialised) return 3;
    if (device < 0 || device >= count || attribute != 132 || multicast[device] < 0) return 1;  /* INVALID_VALUE */
    *value = multicast[device];
    return 0;
}

/* cuda.h: CUresult cuGetErrorName(CUresult error, const char **pStr), cuGetErrorString alike: callable
 * before cuInit; an unknown code is CUDA_ERROR_INVALID_VALUE with *pStr NULL. The texts are the driver's. */
static const struct { int code; const char *name, *text; } errors[] = {
    {0, "CUDA_SUCCESS", "no error"}, {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {802, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static int error_field(int error, const char **out, int text) {
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == error) { *out = text ? errors[i].text : errors[i].name; return 0; }
    *out = NULL;
    return 1;
}

int cuGetErrorName(int error, const char **out) { return error_field(error, out, 0); }

int cuGetErrorString(int error, const char **out) { return error_field(error, out, 1); }

/* cuda.h: CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev), CUuuid { char bytes[16]; }: the "uuid"
 * line's hex digits; a device without one answers CUDA_ERROR_NOT_SUPPORTED. */
int cuDeviceGetUuid(unsigned char *out, int device) {
    if (!initialised) return 3;
    if (device < 0 || device >= count) return 101;
    const char *u = uuids[device];
    if (strncmp(u, "GPU-", 4)) return 801;
    int n = 0;
    for (const char *c = u + 4; *c && n < 32; c++) {
        if (*c == '-') continue;
        unsigned v;
        if (sscanf(c, "%1x", &v) != 1) return 801;
        if (n % 2 == 0) out[n / 2] = (unsigned char)(v << 4); else out[n / 2] |= (unsigned char)v;
        n++;
    }
    return n == 32 ? 0 : 801;
}

int cuDeviceGetUuid_v2(unsigned char *out, int device) { return cuDeviceGetUuid(out, device); }

#ifndef NO_MULTICAST_CREATE
int cuMulticastCreate(void *handle, const void *prop) { (void)handle; (void)prop; return 801; }  /* NOT_SUPPORTED */
#endif
