"""adcore's model of LLVM IR (read from llvmlite's parsed module) and its writer."""
