"""Lowering after inference: tile ops to element loops, loop partition per thread, vectorisation, thread
serialisation for the CPU check, and the pipeline that strings them together. These passes read the
decisions inference wrote into the IR; none of them re-runs an inference rule."""
