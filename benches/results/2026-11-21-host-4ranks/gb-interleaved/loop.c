#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc,char**argv){MPI_Init(&argc,&argv);int r;MPI_Comm_rank(MPI_COMM_WORLD,&r);
int n=argc>1?atoi(argv[1]):200000; double a[1]={1},b[1];
double best=1e9;
for(int rep=0;rep<5;rep++){MPI_Barrier(MPI_COMM_WORLD);double t=MPI_Wtime();
for(int i=0;i<n;i++)MPI_Allreduce(a,b,1,MPI_DOUBLE,MPI_SUM,MPI_COMM_WORLD);
t=(MPI_Wtime()-t)/n*1e6; if(t<best)best=t;}
double m; MPI_Reduce(&best,&m,1,MPI_DOUBLE,MPI_MAX,0,MPI_COMM_WORLD);
if(!r)printf("allreduce loop: best of 5 = %.3f us/call\n",m);MPI_Finalize();}
