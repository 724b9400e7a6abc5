# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Typed C twin of stretch.steady_stretch_py: the same contract and the same results, bit for
bit (tests/sim/test_native.py). The rows' state is copied into C arrays for the stretch and
written back; the iteration time is rounded with rint (half to even, as Python's round())."""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.math cimport rint
from libc.stdlib cimport free, malloc


def steady_stretch(list tok, list first, list owed, Py_ssize_t r, long long it, long long now,
                   long long t_arr, double base, double context_ns, long long kv_sum):
    cdef const unsigned char **seq = <const unsigned char **> malloc(r * sizeof(char *))
    cdef long long *start = <long long *> malloc(r * sizeof(long long))
    cdef long long *left = <long long *> malloc(r * sizeof(long long))
    cdef long long *size = <long long *> malloc(r * sizeof(long long))
    cdef Py_ssize_t k
    cdef long long emitted = 0, end, i, e
    cdef bint finished = False
    cdef bytes row
    if r and (seq == NULL or start == NULL or left == NULL or size == NULL):
        free(seq); free(start); free(left); free(size)
        raise MemoryError()
    try:
        for k in range(r):
            row = <bytes> tok[k]
            seq[k] = <const unsigned char *> PyBytes_AS_STRING(row)
            size[k] = PyBytes_GET_SIZE(row)
            start[k] = first[k]
            left[k] = owed[k]
        while True:
            emitted = 0
            for k in range(r):
                i = it - start[k]
                if i < 0 or i >= size[k]:
                    raise IndexError(f"row {k}: decode step {i} of {size[k]}")
                e = seq[k][i]
                left[k] -= e
                emitted += e
                if left[k] <= 0:
                    finished = True
            if context_ns != 0.0:
                end = now + <long long> rint(base + context_ns * <double> kv_sum)
            else:
                end = now + <long long> rint(base)
            if finished or end >= t_arr:
                break
            kv_sum += emitted
            it += 1
            now = end
        done = None
        for k in range(r):
            owed[k] = left[k]
            if left[k] <= 0:
                if done is None:
                    done = []
                done.append(k)
        return it, now, end, kv_sum, emitted, done
    finally:
        free(seq); free(start); free(left); free(size)
