"""Regenerate tests/conformance/expected_<executor>.txt and the report.

    python tests/conformance/update_expected.py [interp|native]

Same as `python -m onnxcc.conformance --update <executor>`: runs every ONNX backend node
case of the ops onnxcc registers, prints the per-op table and the top failure reasons,
writes the expected-pass list and REPORT.md (REPORT_<executor>.md for other executors).
"""

import sys

from onnxcc.conformance import main

if __name__ == "__main__":
    sys.exit(main(["--update", sys.argv[1] if len(sys.argv) > 1 else "interp", *sys.argv[2:]]))
