"""LLVM helpers both backends share: expression emission, builder helpers, the vector libm, targets."""
