#!/bin/sh
# The real-systemd image (Debian 13: systemd 257, logind, D-Bus, sshd with pam_systemd), built
# once by tests/images/build-debian-image.sh and cached by tag. One package list for the
# systemd suite (tests/systemd/run.sh) and the owner-return bench (tests/bench/owner_return.sh),
# so both use the same image. Prints the image tag.
#   openssh-server, libpam-systemd: a real user's ssh login is a real logind session
#   (class user, type tty), and a PAM service run by systemd-run makes a graphical-type one.
#   e2fsprogs: a dependency of the package (mke2fs, the disk limit), installed with it offline.
#   polkitd: logind asks it whether a user may take an inhibitor lock (without it, "Access
#   denied"): the use scenario's `systemd-inhibit --what=idle` as alice.
#   network-manager: the real NetworkManager whose global Metered pilotd follows (the metered
#   scenario switches a connection with nmcli); iproute2: `ip route`, to see which link carries
#   the default route.
set -eu
exec sh "$(dirname "$0")/../images/build-debian-image.sh" pilotd-test/systemd \
    systemd systemd-sysv dbus iptables openssh-server libpam-systemd e2fsprogs polkitd \
    network-manager iproute2
