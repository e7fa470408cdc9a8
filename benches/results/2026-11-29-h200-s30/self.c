#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int c,char**v){MPI_Init(&c,&v);int r,n;MPI_Comm_rank(MPI_COMM_WORLD,&r);MPI_Comm_size(MPI_COMM_WORLD,&n);
 size_t len=atoi(v[1]);char *s,*d;int hostpeer=c>2&&r==1;if(hostpeer){s=malloc(len);d=malloc(len);}else{cudaMalloc((void**)&s,len);cudaMalloc((void**)&d,len);cudaMemset(s,1,len);cudaDeviceSynchronize();}
 double t[2000];int peer=n>1?1-r:r;
 for(int i=-100;i<2000;i++){double t0=MPI_Wtime();
  if(n==1){MPI_Sendrecv(s,len,MPI_BYTE,0,1,d,len,MPI_BYTE,0,1,MPI_COMM_WORLD,MPI_STATUS_IGNORE);}
  else if(r==0){MPI_Send(s,len,MPI_BYTE,1,1,MPI_COMM_WORLD);MPI_Recv(d,len,MPI_BYTE,1,1,MPI_COMM_WORLD,MPI_STATUS_IGNORE);}
  else {MPI_Recv(d,len,MPI_BYTE,0,1,MPI_COMM_WORLD,MPI_STATUS_IGNORE);MPI_Send(s,len,MPI_BYTE,0,1,MPI_COMM_WORLD);}
  if(i>=0)t[i]=MPI_Wtime()-t0;}
 qsort(t,2000,sizeof(double),cmp); if(r==0)printf("n=%d len=%zu median %.1f us (%s)\n",n,len,t[1000]*1e6,n==1?"self sendrecv":"round trip");
 MPI_Finalize();}
