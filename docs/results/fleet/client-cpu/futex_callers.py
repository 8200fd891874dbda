#!/usr/bin/env python3
"""futex-callers.sh's report: the bench workers' futex calls per
   acquisition, by kind (glibc's malloc and free, tokio's parking and
   wake-ups), and those of malloc and free by the first frame that is not
   the allocator's."""
import collections, json, re, sys

# Frames of the allocator and of the generic box, vector and Arc code around
# it: the caller is the first frame past them.
ALLOCATOR = ('libc', '_int_', 'alloc::alloc', 'Global', 'lll_', 'futex_wait', 'raw_vec',
             'drop_in_place<alloc::', 'Arc<T,A>', 'RawVec', 'dealloc', 'deallocate', 'allocate',
             'alloc_impl', 'alloc::boxed::', 'drop_in_place<core::pin::Pin<alloc::boxed',
             'Vec<T,A>::with_capacity')


def frames(sample):
    lines = [l.strip() for l in sample.strip().split('\n') if l.strip()]
    return lines[0] if lines else '', [re.sub(r' \(.*\)$', '', re.sub(r'^[0-9a-f]+ ', '', l))
                                       for l in lines[1:]]


def main(stacks, bench):
    acq = json.loads(open(bench).readline())['acquisitions']
    kinds, callers = collections.Counter(), collections.Counter()
    for sample in open(stacks).read().split('\n\n'):
        head, fr = frames(sample)
        if not head or 'redis-server' in head:
            continue
        top = ' '.join(fr[:4])
        if any(x in top for x in ('libc_free', 'libc_malloc', '_int_free', '_int_malloc', 'realloc',
                                  'lll_lock')):
            # glibc's low-level lock: an arena's, in malloc and free (the
            # caller is named where perf could unwind past glibc)
            kinds['glibc malloc/free (arena lock)'] += 1
            caller = next((f for f in fr if not any(x in f for x in ALLOCATOR)), '?')
            callers[re.sub(r'\+0x[0-9a-f]+$', '', caller)[:100]] += 1
        elif any(x in f for f in fr for x in ('schedule_task', 'unpark', 'wake_by', '::wake')):
            kinds['tokio: a wake-up unparks a thread'] += 1
        elif any(x in f for f in fr for x in ('park', 'Condvar')):
            kinds['tokio: a worker thread parks'] += 1
        else:
            kinds['other (perf could not unwind past the syscall)'] += 1
    print(f'acquisitions {acq}; futex calls per acquisition:')
    for k, v in kinds.most_common():
        print(f'  {v / acq:.4f}  {k}')
    print(f'  {sum(kinds.values()) / acq:.4f}  all')
    print('malloc/free futex calls by caller:')
    for k, v in callers.most_common(8):
        print(f'  {v / acq:.4f}  {k}')


main(*sys.argv[1:3])
