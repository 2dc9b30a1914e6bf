/*
 * sockaddr.h -- socket addresses between Python's tuple form and the kernel's.
 *
 * The kernel operations (CONNECT, SENDMSG, ACCEPT, RECVMSG) take struct
 * sockaddr; Python code hands us ("host", port) tuples or paths.  Only
 * numeric hosts are handled here; names are resolved before (getaddrinfo).
 */
#ifndef URINGLOOP_SOCKADDR_H
#define URINGLOOP_SOCKADDR_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

/* Each returns the address length, or -EINVAL when `host` is not numeric or
 * the path is too long. */
static inline int ul_sockaddr_inet4(struct sockaddr_storage *ss, const char *host,
                                    unsigned port)
{
    struct sockaddr_in *sin = (struct sockaddr_in *)ss;
    memset(sin, 0, sizeof(*sin));
    sin->sin_family = AF_INET;
    sin->sin_port = htons((unsigned short)port);
    if (host[0] == '\0')
        sin->sin_addr.s_addr = htonl(INADDR_ANY);
    else if (strcmp(host, "<broadcast>") == 0)
        sin->sin_addr.s_addr = htonl(INADDR_BROADCAST);
    else if (inet_pton(AF_INET, host, &sin->sin_addr) != 1)
        return -EINVAL;
    return (int)sizeof(*sin);
}

static inline int ul_sockaddr_inet6(struct sockaddr_storage *ss, const char *host,
                                    unsigned port, unsigned flowinfo, unsigned scope_id)
{
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
    memset(sin6, 0, sizeof(*sin6));
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons((unsigned short)port);
    sin6->sin6_flowinfo = htonl(flowinfo);
    sin6->sin6_scope_id = scope_id;
    if (host[0] != '\0' && inet_pton(AF_INET6, host, &sin6->sin6_addr) != 1)
        return -EINVAL;
    return (int)sizeof(*sin6);
}

/* `path` may start with a NUL byte (Linux abstract namespace). */
static inline int ul_sockaddr_unix(struct sockaddr_storage *ss, const char *path,
                                   size_t len)
{
    struct sockaddr_un *sun = (struct sockaddr_un *)ss;
    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    if (len >= sizeof(sun->sun_path) + (path[0] == '\0'))
        return -EINVAL;
    memcpy(sun->sun_path, path, len);
    if (len > 0 && path[0] == '\0')
        return (int)(offsetof(struct sockaddr_un, sun_path) + len);
    return (int)(offsetof(struct sockaddr_un, sun_path) + len + 1);
}

static inline int ul_sockaddr_family(const struct sockaddr_storage *ss)
{
    return ss->ss_family;
}

/* For AF_INET/AF_INET6: the textual host into `buf` (>= 46 bytes) and the
 * port; returns 0, or -EAFNOSUPPORT. */
static inline int ul_sockaddr_inet_parts(const struct sockaddr_storage *ss, char *buf,
                                         unsigned *port, unsigned *flowinfo,
                                         unsigned *scope_id)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &sin->sin_addr, buf, 46);
        *port = ntohs(sin->sin_port);
        *flowinfo = *scope_id = 0;
        return 0;
    }
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &sin6->sin6_addr, buf, 46);
        *port = ntohs(sin6->sin6_port);
        *flowinfo = ntohl(sin6->sin6_flowinfo);
        *scope_id = sin6->sin6_scope_id;
        return 0;
    }
    return -EAFNOSUPPORT;
}

/* For AF_UNIX: pointer to the path bytes and their length (trailing NUL of
 * a filesystem path not counted). */
static inline const char *ul_sockaddr_unix_path(const struct sockaddr_storage *ss,
                                                socklen_t addrlen, size_t *len)
{
    const struct sockaddr_un *sun = (const struct sockaddr_un *)ss;
    size_t n = addrlen > offsetof(struct sockaddr_un, sun_path)
                   ? addrlen - offsetof(struct sockaddr_un, sun_path) : 0;
    if (n > 0 && sun->sun_path[0] != '\0')
        n = strnlen(sun->sun_path, n);
    *len = n;
    return sun->sun_path;
}

#endif /* URINGLOOP_SOCKADDR_H */
