#!/bin/bash
# Cost of block-tier checksums (issue 20): fio on a tiered pool (PM 256M on
# /dev/shm, SSD image 4G on /var/tmp, placement block-first so data lives on
# the SSD) with two builds of terrace, alternated: OLD (before checksums) and
# NEW. Reads run after a remount (cold DRAM cache: every block is read from
# the device and, with NEW, verified).
#
#   bench/checksum_cost.sh OLD_TERRACE NEW_TERRACE [ROUNDS] > result.json
set -euo pipefail
OLD=$1 NEW=$2 ROUNDS=${3:-2}
W=$(mktemp -d /var/tmp/terrace-csum.XXXXXX)
PM=/dev/shm/terrace-csum-$$.pm MNT=$W/mnt SSD=$W/ssd.img
mkdir -p "$MNT"
cleanup() { umount "$MNT" 2>/dev/null || true; rm -rf "$W" "$PM"; }
trap cleanup EXIT

job() { # name rw bs size [extra]
    local name=$1 rw=$2 bs=$3 size=$4; shift 4
    fio --name="$name" --directory="$MNT" --filename=data --rw="$rw" --bs="$bs" \
        --size="$size" --ioengine=psync --numjobs=1 --group_reporting \
        --output-format=json "$@" 2>/dev/null
}
bw() { python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(j["'"$1"'"]["bw_bytes"]/1e6)'; }
iops() { python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(j["'"$1"'"]["iops"])'; }

run_one() { # binary -> "seqwrite seqread randread randwrite"
    local T=$1
    "$T" mkfs --force --tier "pm:$PM:256M" --tier "ssd:$SSD:4G" >/dev/null
    "$T" mount "$PM" "$MNT" --daemon -o placement_policy=block-first >/dev/null
    local sw sr rr rw
    sw=$(job sw write 1M 1G --end_fsync=1 | bw write)
    sync; sleep 1; "$T" umount "$MNT" >/dev/null; "$T" mount "$PM" "$MNT" --daemon -o placement_policy=block-first >/dev/null
    sr=$(job sr read 1M 1G | bw read)
    sync; sleep 1; "$T" umount "$MNT" >/dev/null; "$T" mount "$PM" "$MNT" --daemon -o placement_policy=block-first,max_read_unit_bytes=4K >/dev/null
    rr=$(job rr randread 4K 1G --runtime=15 --time_based | iops read)
    rw=$(job rw randwrite 4K 1G --runtime=15 --time_based --fsync=64 | iops write)
    sync; sleep 1; "$T" umount "$MNT" >/dev/null
    echo "$sw $sr $rr $rw"
}

echo "{"
echo "  \"machine\": \"$(uname -r), $(nproc) CPUs, $(free -g | awk '/Mem:/{print $2}') GiB RAM\","
echo "  \"date\": \"$(date -u +%FT%TZ)\","
echo "  \"runs\": ["
for r in $(seq 1 "$ROUNDS"); do
    for which in old new; do
        T=$OLD; [ $which = new ] && T=$NEW
        read -r sw sr rr rw < <(run_one "$T")
        sep=","; [ "$r" = "$ROUNDS" ] && [ $which = new ] && sep=""
        echo "    {\"build\": \"$which\", \"round\": $r, \"seqwrite_1m_MBps\": $sw, \"seqread_1m_MBps\": $sr, \"randread_4k_iops\": $rr, \"randwrite_4k_iops\": $rw}$sep"
    done
done
echo "  ]"
echo "}"
