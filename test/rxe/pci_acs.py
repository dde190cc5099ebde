#!/usr/bin/env python3
#
# Reads or sets the ACS control register of a PCI function through its
# config space in sysfs (what setpci does, for a guest whose root has no
# pciutils): pci_acs.py BDF [VALUE]. Prints the register (hex) before any
# change. Exits 1 when the function has no ACS capability.
#
import struct
import sys

ACS_CAP_ID = 0x000d   # PCIe extended capability: Access Control Services
ACS_CTRL   = 6        # its control register, after header and capability

bdf = sys.argv[1]
with open('/sys/bus/pci/devices/%s/config' % bdf, 'r+b') as config:
    space = config.read(4096)
    offset = 0x100
    while offset and offset + 8 <= len(space):
        header, = struct.unpack_from('<I', space, offset)
        if header & 0xffff == ACS_CAP_ID:
            break
        offset = (header >> 20) & 0xffc
    else:
        sys.exit('%s: no ACS capability' % bdf)
    ctrl, = struct.unpack_from('<H', space, offset + ACS_CTRL)
    print('0x%04x' % ctrl)
    if len(sys.argv) > 2:
        config.seek(offset + ACS_CTRL)
        config.write(struct.pack('<H', int(sys.argv[2], 0)))
