"""The UDP sink the zero-copy tests and benchmark (bench/run_zerocopy.py)
send into.

Two network namespaces joined by veth (MTU 65535), 198.18.0.1 on the
source side and 198.18.0.2 on the sink side; the sink drops UDP in its
nftables input hook, before any socket.  It is the one path on this
machine where the kernel really sends without copying.  Needs root, ip
(iproute2) and nft (nftables).
"""
import subprocess

SOURCE_ADDR, SINK_ADDR = "198.18.0.1", "198.18.0.2"


def _sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


def make_udp_sink(src, sink, tag):
    """Create namespaces `src` and `sink` (veth ends `<tag>0`, `<tag>1`, an
    nftables table named `tag`).  Raises subprocess.CalledProcessError, with
    whatever was made already removed."""
    drop_namespaces(src, sink)
    try:
        _sh("ip", "netns", "add", src)
        _sh("ip", "netns", "add", sink)
        _sh("ip", "link", "add", f"{tag}0", "netns", src, "type", "veth",
            "peer", "name", f"{tag}1", "netns", sink)
        _sh("ip", "-n", src, "addr", "add", f"{SOURCE_ADDR}/30", "dev", f"{tag}0")
        _sh("ip", "-n", sink, "addr", "add", f"{SINK_ADDR}/30", "dev", f"{tag}1")
        for ns, dev in ((src, f"{tag}0"), (sink, f"{tag}1")):
            _sh("ip", "-n", ns, "link", "set", dev, "mtu", "65535", "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
        nft = ("ip", "netns", "exec", sink, "nft")
        _sh(*nft, "add", "table", "inet", tag)
        _sh(*nft, "add", "chain", "inet", tag, "input",
            "{ type filter hook input priority 0; }")
        _sh(*nft, "add", "rule", "inet", tag, "input", "meta", "l4proto", "udp", "drop")
    except subprocess.CalledProcessError:
        drop_namespaces(src, sink)
        raise


def drop_namespaces(*names):
    for ns in names:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
