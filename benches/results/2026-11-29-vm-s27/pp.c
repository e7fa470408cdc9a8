#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc,char**argv){MPI_Init(&argc,&argv);int r;MPI_Comm_rank(MPI_COMM_WORLD,&r);
long n=argc>1?atol(argv[1]):1000000;char b[8];
for(int rep=0;rep<5;rep++){MPI_Barrier(MPI_COMM_WORLD);double t=MPI_Wtime();
for(long i=0;i<n;i++){if(r==0){MPI_Send(b,8,MPI_BYTE,1,0,MPI_COMM_WORLD);MPI_Recv(b,8,MPI_BYTE,1,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);}else{MPI_Recv(b,8,MPI_BYTE,0,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);MPI_Send(b,8,MPI_BYTE,0,0,MPI_COMM_WORLD);}}
t=MPI_Wtime()-t; if(r==0)printf("%.4f us one-way\n",t/n/2*1e6);}
MPI_Finalize();}
