// How late a thread that sleeps 1 ms at a time wakes while another thread
// spins on the same core: the epoch ticker beside a worker running a
// sandbox. With an argument, the sleeper first asks for that many
// microseconds as its EEVDF slice (sched_setattr, Linux 6.12), as
// luge-wasmtime's ticker does (epoch.rs, `wake_promptly`).
//
//   cc -O2 -pthread benches/probes/tick_late.c -o /tmp/tick_late
//   taskset -c 1 /tmp/tick_late 0; taskset -c 1 /tmp/tick_late 100
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
struct sched_attr { uint32_t size, sched_policy; uint64_t sched_flags; int32_t sched_nice; uint32_t sched_priority; uint64_t sched_runtime, sched_deadline, sched_period; uint32_t util_min, util_max; };
static volatile int stop;
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
static void *spin(void*a){ while(!stop){} return 0; }
static int cmp(const void*x,const void*y){double a=*(const double*)x,b=*(const double*)y;return a<b?-1:a>b;}
int main(int argc,char**argv){
  long slice = argc>1 ? atol(argv[1]) : 0;
  pthread_t t; pthread_create(&t,0,spin,0);
  usleep(10000);
  if (slice) { struct sched_attr a; memset(&a,0,sizeof a); a.size=sizeof a; a.sched_policy=0; a.sched_runtime=slice*1000;
    if (syscall(SYS_sched_setattr,0,&a,0)) perror("sched_setattr"); }
  double late[2000]; int n=0;
  for(int i=0;i<2000;i++){ double s=now(); usleep(1000); late[n++]=now()-s-1000; }
  stop=1; pthread_join(t,0);
  qsort(late,n,sizeof(double),cmp);
  printf("slice %ld us: late p50 %.0f p90 %.0f p99 %.0f max %.0f us\n",slice,late[n/2],late[n*9/10],late[n*99/100],late[n-1]);
}
