"""Session-wide timelines for the report tests (built by report_timelines)."""
import pytest

from report_timelines import operator_pipeline_run, pipeline_run, replicated_run


@pytest.fixture(scope="session")
def pipeline_timeline():
    """4 stages on 4 IPUs, gradient accumulation 8, one step: the batching guide's Fig 4.1."""
    return pipeline_run()


@pytest.fixture(scope="session")
def replicated_timeline():
    """A single-IPU model on 4 replicas sharing a host link, SinglePipeline, 3 steps."""
    return replicated_run()


@pytest.fixture(scope="session")
def operator_timeline():
    """4 stages of measured operators (matmuls, GELU, layer norm) pipelined on 4 IPUs, G = 8."""
    return operator_pipeline_run()
