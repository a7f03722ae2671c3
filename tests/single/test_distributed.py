"""distributed.py: what every trainer does with Horovod, whatever the
framework (its collectives are exercised by every training test)."""


import pytest
from horovod.common.exceptions import HorovodInternalError

from horovod_train.core import distributed
from horovod_train.core.errors import RunFailed

# The text TensorFlow wraps Horovod's shutdown in (MXNet's is alike).
TF_ERROR = ("Graph execution error:\n\nDetected at node DistributedGradientTape_Allreduce\n"
            "Horovod has been shut down. This was caused by an exception on one of the ranks "
            "or an attempt to allreduce, allgather or broadcast a tensor after one of the ranks "
            "finished execution.")


@pytest.mark.parametrize("error", [HorovodInternalError(TF_ERROR.split("\n")[-1]),
                                   RuntimeError(TF_ERROR)], ids=["pytorch", "tensorflow"])
def test_horovod_ending_the_job_is_one_line(error):
    with pytest.raises(RunFailed) as ended, distributed.one_line_when_horovod_stops():
        raise error
    assert str(ended.value) == ("Horovod stopped the job: Horovod has been shut down (another "
                                "rank ended or stopped answering)")


def test_a_horovod_error_of_another_kind_keeps_its_first_sentence():
    with pytest.raises(RunFailed, match=r"^Horovod stopped the job: Gloo timed out \(another"), \
            distributed.one_line_when_horovod_stops():
        raise HorovodInternalError("Gloo timed out. Details follow.\nmore")


# The text TensorFlow wraps Gloo's error in when the peer's connection broke
# before Horovod shut down (a killed rank).
TF_GLOO_ERROR = (
    "Graph execution error:\n\nDetected at node DistributedGradientTape_Allreduce/cond_8/"
    "HorovodAllreduce_fc2_0 defined at (most recent call last):\n  File \"train.py\", line 27\n"
    "[/build/horovod-0.28.1/third_party/compatible17_gloo/gloo/transport/tcp/pair.cc:614] "
    "Read error [127.0.0.1]:55202: Connection reset by peer\n"
    "\t [[{{node DistributedGradientTape_Allreduce/cond_8/HorovodAllreduce_fc2_0}}]]")


# MXNet's text for the same error (asnumpy() on rank 0 as its peer was
# killed), as a CI run printed it: MXNet reads Gloo's line as a traceback.
MXNET_GLOO_ERROR = ('Traceback (most recent call last):\n  File "Read error [127.0.0.1]", '
                    'line 63908\nMXNetError: Connection reset by peer')


@pytest.mark.parametrize("text, port", [(TF_GLOO_ERROR, 55202), (MXNET_GLOO_ERROR, 63908)],
                         ids=["tensorflow", "mxnet"])
def test_gloos_error_inside_a_frameworks_error_is_the_line(text, port):
    with pytest.raises(RunFailed) as ended, distributed.one_line_when_horovod_stops():
        raise RuntimeError(text)
    assert str(ended.value) == (f"Horovod stopped the job: Read error [127.0.0.1]:{port}: "
                                "Connection reset by peer (another rank ended or stopped "
                                "answering)")


def test_other_errors_pass_through():
    with pytest.raises(ValueError), distributed.one_line_when_horovod_stops():
        raise ValueError("a bug of ours: keep its traceback")


def test_gloos_source_location_is_left_out():
    # Gloo's errors start with a path of the machine that built Horovod.
    error = HorovodInternalError("[/build/horovod/third_party/gloo/gloo/transport/tcp/"
                                 "unbound_buffer.cc:81] Timed out waiting 30000ms for recv "
                                 "operation to complete")
    assert distributed.first_sentence(error) == ("Timed out waiting 30000ms for recv operation "
                                                 "to complete")
