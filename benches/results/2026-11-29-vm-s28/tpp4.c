/* TCP ping-pong between two hosts: mode 1 = one connection both ways, mode 2 = one connection
   per direction (as gpumpi's send comm / recv comm pairs). 16 B header + payload in one sendmsg. */
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
static int qa=0;static void rd(int fd,int n){int got=0;if(qa==2){int z=0;setsockopt(fd,IPPROTO_TCP,TCP_QUICKACK,&z,4);}while(got<n){int r=recv(fd,rb,65536,MSG_DONTWAIT);if(r>0)got+=r;else if(r==0)exit(1);}}
static void snd(int fd,char*b,int n){struct iovec v[2]={{b,16},{b+16,n-16}};struct msghdr m={0};m.msg_iov=v;m.msg_iovlen=2;sendmsg(fd,&m,MSG_NOSIGNAL|MSG_DONTWAIT);}
static int conn(int srv,const char*ip,int port){struct sockaddr_in a={0};a.sin_family=AF_INET;a.sin_port=htons(port);inet_pton(AF_INET,ip,&a.sin_addr);int fd,one=1;
if(srv){int l=socket(AF_INET,SOCK_STREAM,0);setsockopt(l,SOL_SOCKET,SO_REUSEADDR,&one,4);bind(l,(void*)&a,sizeof a);listen(l,1);fd=accept(l,0,0);close(l);}else{fd=socket(AF_INET,SOCK_STREAM,0);while(connect(fd,(void*)&a,sizeof a)){close(fd);usleep(10000);fd=socket(AF_INET,SOCK_STREAM,0);}}
setsockopt(fd,IPPROTO_TCP,TCP_NODELAY,&one,4);return fd;}
int main(int c,char**v){int srv=!strcmp(v[1],"srv");const char*ip=v[2];int it=atoi(v[3]);int mode=atoi(v[4]);
int f1=conn(srv,ip,47113),f2=f1; if(mode>=2) f2=conn(srv,ip,47114); if(mode>=3){qa=mode-2;int z=0;setsockopt(srv?f1:f2,IPPROTO_TCP,TCP_QUICKACK,&z,4);}
/* client sends on f1, receives on f2; server receives on f1, sends on f2 */
char*b=calloc(1,1<<20);int sizes[]={24,80,200,232,264,600,4112};
for(int k=0;k<7;k++){int sz=sizes[k];double t0=0;for(int i=-2000;i<it;i++){if(i==0)t0=now();if(srv){rd(f1,sz);snd(f2,b,sz);}else{snd(f1,b,sz);rd(f2,sz);}}
if(!srv)printf("mode %d %d B: %.2f us one-way\n",mode,sz,(now()-t0)/it/2*1e6);}
return 0;}
