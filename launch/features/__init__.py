"""Features: what researchers do with runs and models beyond launching them (reports and
comparisons of runs, serving, the local workflow and demo, the data report, the doctor),
using the targets, the stores and the context below them."""
