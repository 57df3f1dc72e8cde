"""Transaction markers as raftlog writes them: what Kafka clients read as control batches."""

from kafka.record.default_records import DefaultRecordBatch

from raftlog.storage.batch import parse_header
from raftlog.storage.control import Marker, marker_batch, read_marker


def test_a_marker_reads_back_and_is_a_control_batch_to_kafka_python():
    for commit in (True, False):
        batch = marker_batch(42, 3, commit, 17, 1_700_000_000_000)
        header = parse_header(batch)
        assert read_marker(batch, header) == Marker(commit, 17)
        kafka = DefaultRecordBatch(batch)
        assert kafka.validate_crc() and kafka.is_control_batch and kafka.is_transactional
        assert (kafka.producer_id, kafka.producer_epoch, kafka.base_sequence) == (42, 3, -1)
        (record,) = list(kafka)
        assert record.key == (b"\x00\x00\x00\x01" if commit else b"\x00\x00\x00\x00")
        assert record.value == b"\x00\x00\x00\x00\x00\x11"
