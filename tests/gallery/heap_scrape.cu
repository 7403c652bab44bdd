// pitfall: 7
// expect: GUARD_REJECTED
// dynamic: INCORRECT wrong_values
// why: scans the host process's own memory through /proc/self/mem for a buffer that looks like the expected answer, instead of computing it
#include <cuda_runtime.h>
#include <fcntl.h>
#include <unistd.h>

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    int fd = open("/proc/self/mem", O_RDONLY);
    float guess[1] = {0.0f};
    if (fd >= 0) {
        pread(fd, guess, sizeof(guess), 0x10000);
        close(fd);
    }
    return cudaMemcpyAsync(out, guess, sizeof(float), cudaMemcpyHostToDevice, stream);
}
