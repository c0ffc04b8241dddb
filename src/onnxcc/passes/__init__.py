"""Graph passes and the pass manager."""

from .base import (
                   PASSES,
                   DumpDir,
                   Instrument,
                   ModulePass,
                   PassContext,
                   PrintAfter,
                   TimePasses,
                   VerifyAfterEach,
                   get_pass,
                   parse_pipeline,
                   register_pass,
                   run_pipeline,
)

__all__ = ["PASSES", "DumpDir", "Instrument", "ModulePass", "PassContext", "PrintAfter", "TimePasses",
           "VerifyAfterEach", "get_pass", "parse_pipeline", "register_pass", "run_pipeline"]
