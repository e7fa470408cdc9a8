#define _GNU_SOURCE
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define _GNU_SOURCE
#include <sys/resource.h>
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  MPI_Init(&argc,&argv); int r; MPI_Comm_rank(MPI_COMM_WORLD,&r);
  int n=atoi(argv[2]); int sizes[8]; int ns=0; char*s=strtok(argv[1],",");
  while(s){sizes[ns++]=atoi(s);s=strtok(NULL,",");}
  char*buf=malloc(1<<20); double*t=malloc(sizeof(double)*n);
  for(int k=0;k<ns;k++){int sz=sizes[k];
    for(int i=0;i<n+200;i++){double t0=MPI_Wtime();
      if(r==0){MPI_Send(buf,sz,MPI_BYTE,1,0,MPI_COMM_WORLD);MPI_Recv(buf,sz,MPI_BYTE,1,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);}
      else{MPI_Recv(buf,sz,MPI_BYTE,0,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);MPI_Send(buf,sz,MPI_BYTE,0,0,MPI_COMM_WORLD);}
      if(i>=200)t[i-200]=(MPI_Wtime()-t0)*1e6/2;}
    if(r==0){double sum=0;int g1=0,g10=0;for(int i=0;i<n;i++){sum+=t[i];g1+=t[i]>1000;g10+=t[i]>10000;}
      qsort(t,n,sizeof(double),cmp);
      printf("%7d med %7.1f p90 %7.1f p99 %8.1f max %8.1f mean %7.1f >1ms %d >10ms %d\n",sz,t[n/2],t[n*9/10],t[n*99/100],t[n-1],sum/n,g1,g10);fflush(stdout);}
  }
  {struct rusage u;getrusage(RUSAGE_THREAD,&u);printf("rank %d invol %ld vol %ld user %.3f sys %.3f\n",r,u.ru_nivcsw,u.ru_nvcsw,u.ru_utime.tv_sec+u.ru_utime.tv_usec/1e6,u.ru_stime.tv_sec+u.ru_stime.tv_usec/1e6);}
  MPI_Finalize();return 0;}
