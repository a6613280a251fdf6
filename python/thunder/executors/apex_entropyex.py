"""The apex cross-entropy executor under its other module name (seed 001 imports it from here);
the same executor object as thunder.executors.apexex.apex_ex."""

from thunder.executors.apexex import apex_cross_entropy, apex_cross_entropy_backward, apex_ex

__all__ = ["apex_ex", "apex_cross_entropy", "apex_cross_entropy_backward"]
