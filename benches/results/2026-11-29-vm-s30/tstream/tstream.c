/* One TCP stream of messages (16-byte header + payload) between two namespace nodes,
   nonblocking sockets polled: tstream srv|cli IP MODE KIB COUNT. The receiver takes each payload
   straight into a large buffer (cycling over 64 MiB) in mode 0; through a 256 KiB slot and a
   copy in 1; straight, with an 8-byte reply per message on the same connection, in 2; straight,
   the sender writing in 256 KiB calls, in 3; straight, read in 256 KiB calls, in 4. Prints GB/s
   at the sender. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void rdall(int fd, char*b, size_t n){size_t g=0;while(g<n){ssize_t r=recv(fd,b+g,n-g,MSG_DONTWAIT);if(r==0)exit(1);if(r>0)g+=r;}}
static void wrall(int fd, char*b, size_t n){size_t g=0;while(g<n){ssize_t r=send(fd,b+g,n-g,MSG_NOSIGNAL|MSG_DONTWAIT);if(r>0)g+=r;}}
int main(int c,char**v){int srv=!strcmp(v[1],"srv");const char*ip=v[2];int mode=atoi(v[3]);size_t msz=(size_t)atoi(v[4])<<10;int nmsg=atoi(v[5]);
 struct sockaddr_in a={0};a.sin_family=AF_INET;a.sin_port=htons(47200+mode);inet_pton(AF_INET,ip,&a.sin_addr);int fd,one=1;
 if(srv){int l=socket(AF_INET,SOCK_STREAM,0);setsockopt(l,SOL_SOCKET,SO_REUSEADDR,&one,4);bind(l,(void*)&a,sizeof a);listen(l,1);fd=accept(l,0,0);close(l);}
 else{fd=socket(AF_INET,SOCK_STREAM,0);while(connect(fd,(void*)&a,sizeof a)){close(fd);usleep(10000);fd=socket(AF_INET,SOCK_STREAM,0);}}
 setsockopt(fd,IPPROTO_TCP,TCP_NODELAY,&one,4);
 size_t big=64<<20; char*B=malloc(big);memset(B,1,big);char*slot=malloc(256<<10);char h[16]={0},rep[8]={0};
 double t0=0;
 for(int i=-20;i<nmsg;i++){ if(i==0)t0=now(); size_t off=((size_t)(i<0?0:i)*msz)%(big-msz+1);
  if(!srv){wrall(fd,h,16); if(mode==3){for(size_t g=0;g<msz;g+=256<<10)wrall(fd,B+off+g,msz-g<(256<<10)?msz-g:(256<<10));} else wrall(fd,B+off,msz); if(mode==2) rdall(fd,rep,8);}
  else{rdall(fd,h,16); if(mode==1){size_t g=0;while(g<msz){size_t k=msz-g<(256<<10)?msz-g:(256<<10);rdall(fd,slot,k);memcpy(B+off+g,slot,k);g+=k;}} else if(mode==4){for(size_t g=0;g<msz;g+=256<<10)rdall(fd,B+off+g,msz-g<(256<<10)?msz-g:(256<<10));} else rdall(fd,B+off,msz); if(mode==2) wrall(fd,rep,8);}}
 if(!srv){ rdall(fd,rep,1); printf("mode %d msg %zu KiB: %.2f GB/s\n",mode,msz>>10,(double)msz*nmsg/(now()-t0)/1e9);} else wrall(fd,rep,1);
 return 0;}
