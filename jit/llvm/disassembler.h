// Reading generated machine code back: the instructions of an object file's code sections as text,
// decoded by LLVM's MC disassembler. The per-target code generation tests use it to check which
// instructions (zmm registers, FMAs, dot products, tiles) a target's code contains.
//
// No LLVM types appear here.
#pragma once

#include <string>
#include <vector>

namespace tessera::jit {

struct Instruction {
  std::string mnemonic;  // "vfmadd231ps" (an encoding prefix such as {vex} is left out)
  std::string text;      // "vfmadd231ps ymm0, ymm1, ymmword ptr [rax]" (Intel syntax)
};

// Every instruction of the object file's code sections, in order. Bytes that do not decode appear
// as the mnemonic "(bad)".
std::vector<Instruction> disassemble(const std::string& object);

}  // namespace tessera::jit
