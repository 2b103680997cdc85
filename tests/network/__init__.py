"""Hosts for the test suite: network namespaces with kernel-level faults, and a TCP fault proxy.

`netns.Network` makes "hosts" (a namespace joined to the root namespace by a veth pair) and
"service addresses" in the root namespace that the hosts reach only through their veth;
`proxy.FaultProxy` adds latency, resets and refusals in user space (this kernel has no netem).
"""
