#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>
int main(int c,char**v){MPI_Init(&c,&v);char *s,*d;cudaMalloc((void**)&s,64);cudaMalloc((void**)&d,64);
 for(int i=0;i<100;i++)MPI_Sendrecv(s,8,MPI_BYTE,0,1,d,8,MPI_BYTE,0,1,MPI_COMM_WORLD,MPI_STATUS_IGNORE);
 MPI_Request r; char h[8]; MPI_Irecv(h,8,MPI_BYTE,0,99,MPI_COMM_WORLD,&r); double t0=MPI_Wtime(); int f=0;
 while(MPI_Wtime()-t0<atof(v[1])) MPI_Test(&r,&f,MPI_STATUS_IGNORE);
 MPI_Cancel(&r); MPI_Wait(&r,MPI_STATUS_IGNORE); printf("idle done\n"); MPI_Finalize();}
