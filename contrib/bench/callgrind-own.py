#!/usr/bin/env python3
#
# callgrind-own.py DIR [N2]: from the callgrind files that
# contrib/bench-callgrind.sh --keep DIR left (its -n N2 runs, default 200),
# each operation's instructions per call, inclusive and without what it
# spends in the stand-in's post (tnic_post_send: the provider's work, the
# same for both transports). On the stand-in NIC (--tnic) the provider's
# post costs far more than a hardware provider's and varies with its device
# thread's timing: the second column compares the transports' own code.
#
import glob
import re
import sys


def parse(path):
    """Function names by id, and per (caller, callee) [calls, inclusive Ir]"""
    names, arcs = {}, {}
    caller = callee = None
    lines = open(path).read().split('\n')
    for i, line in enumerate(lines):
        m = re.match(r'^(c?fn)=\((\d+)\)(?: (.*))?$', line)
        if m:
            if m.group(3):
                names[m.group(2)] = m.group(3)
            if m.group(1) == 'cfn':
                callee = m.group(2)
            else:
                caller, callee = m.group(2), None
            continue
        if callee and line.startswith('calls='):
            calls = int(line[6:].split()[0])
            cost = int(lines[i + 1].split()[-1])
            arc = arcs.setdefault((caller, callee), [0, 0])
            arc[0] += calls
            arc[1] += cost
            callee = None
    return names, arcs


def main():
    n2 = sys.argv[2] if len(sys.argv) > 2 else '200'
    print('%-10s %-9s %6s %12s %12s' % ('case', 'transport', 'calls',
                                        'Ir/call', 'own Ir/call'))
    for path in sorted(glob.glob('%s/*.%s.cg' % (sys.argv[1], n2))):
        case, tl = path.split('/')[-1].split('.')[:2]
        names, arcs = parse(path)
        op = {i for i, n in names.items()
              if re.search(r'uct_%s_ep_%s$' % (tl, case), n)}
        calls = incl = verbs = 0
        for (caller, callee), (n, cost) in arcs.items():
            if callee in op and caller not in op:
                calls += n
                incl  += cost
            # the provider's entry, from wherever the operation reached it
            # (rc_verbs posts from helpers of its own); only operations
            # post in these runs (collection is on in them and in progress)
            if (re.search(r'(^|[ :])tnic_post_send$', names.get(callee, ''))
                    and not re.search(r'(^|[ :])tnic_',
                                      names.get(caller, ''))):
                verbs += cost
        if calls:
            print('%-10s %-9s %6d %12.1f %12.1f' %
                  (case, tl, calls, incl / calls, (incl - verbs) / calls))


main()
