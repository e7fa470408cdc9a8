#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <errno.h>
#include <poll.h>
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static int mode; /* 0 recv spin, 1 poll then recv */
static void rd(int fd,char*b,int n){int got=0;while(got<n){if(mode){struct pollfd p={fd,POLLIN,0};if(poll(&p,1,0)<=0)continue;}int r=recv(fd,b+got,n-got,MSG_DONTWAIT);if(r>0)got+=r;else if(r==0)exit(1);}}
int main(int c,char**v){int srv=!strcmp(v[1],"srv");const char*ip=v[2];int n=atoi(v[3]);int it=atoi(v[4]);mode=c>5?atoi(v[5]):0;
struct sockaddr_in a={0};a.sin_family=AF_INET;a.sin_port=htons(47111);inet_pton(AF_INET,ip,&a.sin_addr);int fd,one=1;
if(srv){int l=socket(AF_INET,SOCK_STREAM,0);setsockopt(l,SOL_SOCKET,SO_REUSEADDR,&one,4);bind(l,(void*)&a,sizeof a);listen(l,1);fd=accept(l,0,0);}else{fd=socket(AF_INET,SOCK_STREAM,0);while(connect(fd,(void*)&a,sizeof a)){usleep(10000);}}
setsockopt(fd,IPPROTO_TCP,TCP_NODELAY,&one,4);char*b=calloc(1,1<<20);
for(int sz=n;sz<=4096;sz*=2){double t0=0;for(int i=-1000;i<it;i++){if(i==0)t0=now();if(srv){rd(fd,b,sz);send(fd,b,sz,0);}else{send(fd,b,sz,0);rd(fd,b,sz);}}
if(!srv)printf("%d B: %.2f us one-way\n",sz,(now()-t0)/it/2*1e6);}
return 0;}
