#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <sys/uio.h>
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static char rb[65536];
static void rd(int fd,int n){int got=0;while(got<n){int r=recv(fd,rb,65536,MSG_DONTWAIT);if(r>0)got+=r;else if(r==0)exit(1);}}
static void snd(int fd,char*b,int n){struct iovec v[2]={{b,16},{b+16,n-16}};struct msghdr m={0};m.msg_iov=v;m.msg_iovlen=2;sendmsg(fd,&m,MSG_NOSIGNAL|MSG_DONTWAIT);}
int main(int c,char**v){int srv=!strcmp(v[1],"srv");const char*ip=v[2];int it=atoi(v[3]);
struct sockaddr_in a={0};a.sin_family=AF_INET;a.sin_port=htons(47112);inet_pton(AF_INET,ip,&a.sin_addr);int fd,one=1;
if(srv){int l=socket(AF_INET,SOCK_STREAM,0);setsockopt(l,SOL_SOCKET,SO_REUSEADDR,&one,4);bind(l,(void*)&a,sizeof a);listen(l,1);fd=accept(l,0,0);}else{fd=socket(AF_INET,SOCK_STREAM,0);while(connect(fd,(void*)&a,sizeof a)){usleep(10000);}}
setsockopt(fd,IPPROTO_TCP,TCP_NODELAY,&one,4);char*b=calloc(1,1<<20);int sizes[]={80,200,232,248,256,264,272,280,296,328,600};
for(int k=0;k<11;k++){int sz=sizes[k];double t0=0;for(int i=-1000;i<it;i++){if(i==0)t0=now();if(srv){rd(fd,sz);snd(fd,b,sz);}else{snd(fd,b,sz);rd(fd,sz);}}
if(!srv)printf("%d B: %.2f us one-way\n",sz,(now()-t0)/it/2*1e6);}
return 0;}
