"""The floor under everything: what a process computes with and reads through, whichever stage it runs.

CPU kernels pinned to the same bytes on every x86-64 CPU (cpu_kernels), the libraries' known warnings
filtered (library_noise), and files outside results/ read through links named by their content
(input_links). Nothing here imports the rest of the package.
"""
