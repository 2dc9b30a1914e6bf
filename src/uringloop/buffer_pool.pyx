# Registered buffers: memory for write_zerocopy()/sendto_zerocopy() that the
# ring knows in advance.
#
# A SEND_ZC from ordinary memory pins its pages for each request (and charges
# len/4096 + 2 pages to RLIMIT_MEMLOCK while it is in flight); a SEND_ZC with
# IORING_RECVSEND_FIXED_BUF names a buffer registered once with
# IORING_REGISTER_BUFFERS_UPDATE and pins nothing per send.  The pool hands
# out RegisteredBuffer objects cut, page aligned, from a few large regions;
# each region is one slot of a sparse buffer table registered on the loop's
# ring (IORING_REGISTER_BUFFERS2, 5.19).  A send looks its buffer up by
# address (index_of), so a memoryview slice of a RegisteredBuffer is just as
# good as the whole object.
#
# When the kernel refuses a registration -- -ENOMEM past RLIMIT_MEMLOCK for a
# process without CAP_IPC_LOCK, an old kernel, a full table -- the region
# stays ordinary memory: its buffers still work with write_zerocopy(), which
# then uses SEND_ZC without FIXED_BUF (or a copying send when that too is
# refused).  The reason is kept in loop.stats()['buffer_pool'].
#
# Lifetime: a region is unmapped only when its last RegisteredBuffer has given
# its pages back and the pool dropped it; a RegisteredBuffer is kept alive by
# the views of it, and a send in flight holds such a view until the kernel's
# notification, so no page is unmapped or reused while the kernel may read it.
#
# Bounded memory: a region whose buffers have all come back is idle.  The
# pool keeps idle regions up to IDLE_KEEP_BYTES for reuse and drops the rest
# (the slot is unregistered, which unpins the pages, and the memory
# unmapped), so what it holds stays near what is alive.  Regions for buffers
# larger than REGION_SIZE are rounded up to a size class (eight per power
# of two), so that a buffer a little larger than the last can reuse its idle
# region: without both, 300 buffers of 4 MiB + k pages, each released
# before the next, left 300 regions (1.3 GiB) and a full table.

from posix.mman cimport mmap, munmap, PROT_READ, PROT_WRITE, MAP_PRIVATE, MAP_ANONYMOUS, MAP_FAILED

cdef size_t PAGE = 4096
cdef size_t REGION_SIZE = 4 * 1024 * 1024     # a new region, unless asked for more
cdef size_t MAX_BUFFER = 1 << 30              # the kernel's limit per registered buffer
cdef unsigned TABLE_SLOTS = 64
cdef size_t IDLE_KEEP_BYTES = 2 * REGION_SIZE   # idle regions kept for reuse


cdef size_t region_size_for(size_t span):
    """A region for `span` bytes: REGION_SIZE, or span rounded up to a
    multiple of the power of two in (span/16, span/8] (eight size classes
    per power of two, at most 12.5% more: 4 MiB + 1 byte maps 4.5 MiB)."""
    cdef size_t step = 1
    if span <= REGION_SIZE:
        return REGION_SIZE
    while step * 16 <= span:
        step *= 2
    return (span + step - 1) & ~(step - 1)
cdef char *BYTE_FORMAT = b'B'


@cython.no_gc_clear      # its free_runs must survive until buffers give pages back
cdef class PoolRegion:

    def __dealloc__(self):
        if self.base != NULL:
            munmap(self.base, self.size)
            self.base = NULL
            UL_COUNT(UL_LIVE_POOL_REGIONS, -1)

    cdef Py_ssize_t take(self, size_t length):
        """First fit: the offset of `length` free bytes, or -1."""
        cdef Py_ssize_t i
        for i in range(len(self.free_runs)):
            run = self.free_runs[i]
            if run[1] >= length:
                offset = run[0]
                if run[1] == length:
                    del self.free_runs[i]
                else:
                    run[0] += length
                    run[1] -= length
                self.live += 1
                return offset
        return -1

    cdef int give_back(self, size_t offset, size_t length) except -1:
        cdef Py_ssize_t i = 0, n = len(self.free_runs)
        while i < n and self.free_runs[i][0] < offset:
            i += 1
        self.free_runs.insert(i, [offset, length])
        # merge with the following run, then with the preceding one
        if i + 1 < len(self.free_runs) and offset + length == self.free_runs[i + 1][0]:
            self.free_runs[i][1] += self.free_runs[i + 1][1]
            del self.free_runs[i + 1]
        if i > 0 and self.free_runs[i - 1][0] + self.free_runs[i - 1][1] == offset:
            self.free_runs[i - 1][1] += self.free_runs[i][1]
            del self.free_runs[i]
        self.live -= 1
        if self.live == 0 and self.pool is not None:
            self.pool.region_idle(self)
        return 0


cdef PoolRegion new_region(size_t size):
    cdef PoolRegion region = PoolRegion.__new__(PoolRegion)
    cdef void *base = mmap(NULL, size, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    if base == MAP_FAILED:
        raise MemoryError(f'cannot map {size} bytes for registered buffers')
    region.base = <char *>base
    UL_COUNT(UL_LIVE_POOL_REGIONS, 1)
    region.size = size
    region.index = -1
    region.free_runs = [[0, size]]
    return region


# no_gc_clear: a RegisteredBuffer caught in a reference cycle must still see
# its region in __dealloc__ to give its pages back (found by the debug
# build's counters: a cleared region field lost the pages for good).
@cython.final
@cython.no_gc_clear
cdef class RegisteredBuffer:
    """Writable memory from the loop's registered-buffer pool (made by
    loop.zerocopy_buffer()).  Use it like a bytearray of fixed size --
    memoryview(buf)[a:b] = data -- and send it, or a slice of it, with
    transport.write_zerocopy() or sendto_zerocopy(); reuse it once that
    future has resolved.  release() (or leaving a `with` block) gives the
    memory back to the pool at once; otherwise it goes back when the object
    is collected."""

    def __init__(self):
        raise TypeError('RegisteredBuffer objects come from loop.zerocopy_buffer(size)')

    def __getbuffer__(self, Py_buffer *view, int flags):
        if self.returned:
            raise ValueError('the registered buffer was released')
        view.buf = self.region.base + self.offset
        view.obj = self
        view.len = self.length
        view.readonly = 0
        view.itemsize = 1
        view.format = NULL
        if flags & PyBUF_FORMAT:
            view.format = BYTE_FORMAT
        view.ndim = 1
        view.shape = &view.len if flags & PyBUF_ND else NULL
        view.strides = &view.itemsize if flags & PyBUF_STRIDES else NULL
        view.suboffsets = NULL
        view.internal = NULL
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *view):
        self.exports -= 1

    def __len__(self):
        return self.length

    @property
    def registered(self):
        """True when the memory is registered with the ring: zero-copy sends
        from it use IORING_RECVSEND_FIXED_BUF and pin no pages."""
        return self.region is not None and self.region.index >= 0 and not self.returned

    def release(self):
        """Give the memory back to the pool now.  Raises BufferError while a
        view of it exists -- including the one a write_zerocopy() holds until
        its future resolves."""
        if self.exports:
            raise BufferError(f'{self.exports} view(s) of the registered buffer '
                              f'still exist (or a send still holds it)')
        self.return_pages()

    cdef int return_pages(self) except -1:
        cdef PoolRegion region = self.region
        if not self.returned and region is not None:
            self.returned = True
            self.region = None      # a dropped region is unmapped with its last user
            region.give_back(self.offset, self.span)
            UL_COUNT(UL_LIVE_REGISTERED_BUFFERS, -1)
        return 0

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.release()

    def __repr__(self):
        state = ('released' if self.returned else
                 'registered' if self.registered else 'not registered')
        return f'<RegisteredBuffer {self.length} bytes, {state}>'

    def __dealloc__(self):
        # no view can be left: each one holds a reference to us
        self.return_pages()


cdef class BufferPool:
    """The loop's registered-buffer regions and where each one sits in the
    ring's buffer table."""

    def __cinit__(self):
        self.regions = []
        self.table_slots = -1        # not tried yet

    cdef RegisteredBuffer allocate(self, ul_ring *ring, size_t length):
        cdef RegisteredBuffer rb
        cdef PoolRegion region = None
        cdef Py_ssize_t offset = -1
        cdef size_t span = (length + PAGE - 1) & ~(PAGE - 1)
        for candidate in self.regions:
            offset = (<PoolRegion>candidate).take(span)
            if offset >= 0:
                region = candidate
                break
        if region is None:
            region = new_region(region_size_for(span))
            region.pool = self
            self.ring = ring
            self.register(ring, region)
            self.regions.append(region)
            offset = region.take(span)
        rb = RegisteredBuffer.__new__(RegisteredBuffer)
        rb.region = region
        rb.offset = offset
        rb.length = length
        rb.span = span
        UL_COUNT(UL_LIVE_REGISTERED_BUFFERS, 1)
        return rb

    cdef register(self, ul_ring *ring, PoolRegion region):
        cdef int ret
        cdef int slot
        if self.table_slots < 0:
            ret = ul_ring_register_buffer_table(ring, TABLE_SLOTS)
            if ret < 0:
                self.table_slots = 0
                self.note_refusal('registering the buffer table', ret)
            else:
                self.table_slots = TABLE_SLOTS
        used = {(<PoolRegion>r).index for r in self.regions}
        for slot in range(self.table_slots):
            if slot not in used:
                break
        else:
            if self.table_slots:
                self.unregistered_reason = f'the buffer table is full ({self.table_slots} regions)'
            self.unregistered_bytes += region.size
            return
        ret = ul_ring_update_buffer(ring, slot, region.base, region.size)
        if ret < 0:
            self.note_refusal(f'registering {region.size} bytes', ret)
            self.unregistered_bytes += region.size
            return
        region.index = slot
        self.registered_bytes += region.size

    cdef note_refusal(self, str what, int ret):
        reason = f'{what}: {os.strerror(-ret)}'
        if ret == -ENOMEM:
            reason += (' (RLIMIT_MEMLOCK is too small for the pinned pages; '
                       'raise it with ulimit -l or run with CAP_IPC_LOCK)')
        if self.unregistered_reason != reason:
            logger.info('uringloop: zero-copy buffers stay unregistered: %s', reason)
        self.unregistered_reason = reason

    cdef int index_of(self, char *buf, size_t length):
        """The table slot of the registered region holding [buf, buf+length),
        or -1."""
        cdef PoolRegion region
        for r in self.regions:
            region = <PoolRegion>r
            if (region.index >= 0 and buf >= region.base
                    and buf + length <= region.base + region.size):
                return region.index
        return -1

    cdef int region_idle(self, PoolRegion region) except -1:
        """Every buffer of `region` came back: keep the most recently idle
        regions up to IDLE_KEEP_BYTES, drop the others."""
        cdef size_t kept = 0
        cdef PoolRegion r
        if region not in self.regions:
            return 0
        # the newest idle region first, then the others, newest last
        idle = [region] + [r for r in reversed(self.regions)
                           if r is not region and (<PoolRegion>r).live == 0]
        for r in idle:
            if kept + r.size <= IDLE_KEEP_BYTES:
                kept += r.size
            else:
                self.drop_region(r)
        return 0

    cdef int drop_region(self, PoolRegion region) except -1:
        """Unregister an idle region and let it go (unmapped when the last
        reference is gone: no buffer and no send uses it)."""
        cdef int ret
        if region.index >= 0:
            if self.ring != NULL:
                ret = ul_ring_update_buffer(self.ring, region.index, NULL, 0)
                if ret < 0:
                    return 0        # keep it rather than leave a stale slot
            self.registered_bytes -= region.size
            region.index = -1
        else:
            self.unregistered_bytes -= region.size
        region.pool = None
        self.regions.remove(region)
        self.regions_dropped += 1
        return 0

    cdef int close(self) except -1:
        """The ring is going away: its registrations with it.  Buffers still
        referenced stay valid memory (their regions live on with them)."""
        for r in self.regions:
            (<PoolRegion>r).index = -1
            (<PoolRegion>r).pool = None
        self.regions = []
        self.ring = NULL
        return 0

    def stats(self):
        """'regions' mapped and 'mapped_bytes', of which 'idle_bytes' hold
        no buffer; 'registered_bytes'/'unregistered_bytes'; 'buffers' alive;
        'table_full' when a region found no slot in the ring's buffer table
        (its buffers then pin pages per send); 'regions_dropped' idle regions
        given back; 'unregistered_reason'."""
        cdef PoolRegion r
        live = 0
        mapped = idle = 0
        used_slots = 0
        for r in self.regions:
            live += r.live
            mapped += r.size
            if r.live == 0:
                idle += r.size
            if r.index >= 0:
                used_slots += 1
        return {
            'regions': len(self.regions),
            'mapped_bytes': mapped,
            'idle_bytes': idle,
            'registered_bytes': self.registered_bytes,
            'unregistered_bytes': self.unregistered_bytes,
            'buffers': live,
            'table_slots': max(self.table_slots, 0),
            'table_full': self.table_slots > 0 and used_slots >= self.table_slots,
            'regions_dropped': self.regions_dropped,
            'unregistered_reason': self.unregistered_reason,
        }


# RingLoop takes it as it is (zerocopy_buffer = zerocopy_buffer)
def zerocopy_buffer(RingLoop self, size):
    """Memory of `size` bytes from the loop's registered-buffer pool,
    for transport.write_zerocopy() / sendto_zerocopy(): a zero-copy send
    from it pins no pages (IORING_RECVSEND_FIXED_BUF).  Returns a
    RegisteredBuffer; its .registered is False when the kernel refused
    the registration (RLIMIT_MEMLOCK, see stats()['buffer_pool']), and
    it then works as ordinary memory.  Raises ValueError for a size
    outside 1 byte..1 GiB, TypeError for a non-integer, RuntimeError
    on a closed loop."""
    size = PyNumber_Index(size)
    if not 0 < size <= MAX_BUFFER:
        raise ValueError(f'size must be between 1 and {MAX_BUFFER} bytes, not {size}')
    if not self.ring.open:
        raise RuntimeError('Event loop is closed')
    if self.buffer_pool is None:
        self.buffer_pool = BufferPool.__new__(BufferPool)
    return self.buffer_pool.allocate(&self.ring.r, <size_t>size)
