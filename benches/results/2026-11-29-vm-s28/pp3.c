#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc,char**argv){MPI_Init(&argc,&argv);int r;MPI_Comm_rank(MPI_COMM_WORLD,&r);
long n=20000; if(getenv("ORDERED")){int x=0;if(r==0){MPI_Send(&x,1,MPI_INT,1,5,MPI_COMM_WORLD);MPI_Recv(&x,1,MPI_INT,1,5,MPI_COMM_WORLD,MPI_STATUS_IGNORE);}else{MPI_Recv(&x,1,MPI_INT,0,5,MPI_COMM_WORLD,MPI_STATUS_IGNORE);MPI_Send(&x,1,MPI_INT,0,5,MPI_COMM_WORLD);}}static char b[4096];int sizes[]={8,64,128,160,192,224,256,512};
for(int mode=0;mode<2;mode++)for(int k=0;k<8;k++){int sz=sizes[k];MPI_Barrier(MPI_COMM_WORLD);double t=0;
for(long i=-1000;i<n;i++){if(i==0)t=MPI_Wtime();
 if(mode==0){if(r==0){MPI_Send(b,sz,MPI_BYTE,1,0,MPI_COMM_WORLD);MPI_Recv(b,sz,MPI_BYTE,1,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);}else{MPI_Recv(b,sz,MPI_BYTE,0,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);MPI_Send(b,sz,MPI_BYTE,0,0,MPI_COMM_WORLD);}}
 else{MPI_Request q;MPI_Irecv(b,sz,MPI_BYTE,1-r,0,MPI_COMM_WORLD,&q);if(r==0){MPI_Send(b,sz,MPI_BYTE,1,0,MPI_COMM_WORLD);MPI_Wait(&q,MPI_STATUS_IGNORE);}else{MPI_Wait(&q,MPI_STATUS_IGNORE);MPI_Send(b,sz,MPI_BYTE,0,0,MPI_COMM_WORLD);}}}
t=MPI_Wtime()-t; if(r==0)printf("%s %d B: %.2f us\n",mode?"irecv":"recv",sz,t/n/2*1e6);}
MPI_Finalize();}
