#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc,char**argv){MPI_Init(&argc,&argv);int r;MPI_Comm_rank(MPI_COMM_WORLD,&r);
long n=argc>1?atol(argv[1]):1000000;int f;
if(r==0){for(int rep=0;rep<3;rep++){double t=MPI_Wtime();for(long i=0;i<n;i++)MPI_Iprobe(1,0,MPI_COMM_WORLD,&f,MPI_STATUS_IGNORE);t=MPI_Wtime()-t;printf("iprobe %.1f ns\n",t/n*1e9);
t=MPI_Wtime();char b[8];MPI_Request q;for(long i=0;i<n;i++){MPI_Irecv(b,8,MPI_BYTE,1,0,MPI_COMM_WORLD,&q);MPI_Cancel(&q);MPI_Wait(&q,MPI_STATUS_IGNORE);}t=MPI_Wtime()-t;printf("irecv+cancel %.1f ns\n",t/n*1e9);
t=MPI_Wtime();for(long i=0;i<n;i++){MPI_Send(b,8,MPI_BYTE,0,0,MPI_COMM_WORLD);MPI_Recv(b,8,MPI_BYTE,0,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);}t=MPI_Wtime()-t;printf("self send+recv %.1f ns\n",t/n*1e9);
t=MPI_Wtime();for(long i=0;i<n;i++){MPI_Wtime();}t=MPI_Wtime()-t;printf("wtime %.1f ns\n",t/n*1e9);
}}
MPI_Barrier(MPI_COMM_WORLD);
MPI_Finalize();}
