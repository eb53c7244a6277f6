#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
static int which, iters = 2000000;
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
static void *run(void *a){(void)a; cudaSetDevice(0); int d; CUcontext c; CUdevice dv;
 for(int i=0;i<iters;i++){ if(which==0) cudaGetDevice(&d); else if(which==1) cuCtxGetCurrent(&c); else cuCtxGetDevice(&dv);} return NULL;}
int main(void){ const char *names[]={"cudaGetDevice","cuCtxGetCurrent","cuCtxGetDevice"}; cudaFree(0);
 for(which=0;which<3;which++) for(int n=1;n<=8;n*=8){ pthread_t t[8]; double t0=now(); for(int i=0;i<n;i++) pthread_create(&t[i],0,run,0); for(int i=0;i<n;i++) pthread_join(t[i],0); double el=now()-t0; printf("%s threads %d: %.1f ns/call per thread, %.1f Mcalls/s total\n",names[which],n,el/iters,n*iters/el*1e3);} return 0;}
