#include "jit/llvm/disassembler.h"

#include <llvm/MC/MCAsmInfo.h>
#include <llvm/MC/MCContext.h>
#include <llvm/MC/MCDisassembler/MCDisassembler.h>
#include <llvm/MC/MCInst.h>
#include <llvm/MC/MCInstPrinter.h>
#include <llvm/MC/MCInstrInfo.h>
#include <llvm/MC/MCRegisterInfo.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/MCTargetOptions.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>

#include <memory>

#include "jit/ir/diagnostics.h"

namespace tessera::jit {

namespace {

[[noreturn]] void fail(const std::string& what) { throw InternalError("disassembler", what); }

// "\tvfmadd231ps\tymm0, ymm1" -> "vfmadd231ps ymm0, ymm1"
std::string tidy(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\t') c = ' ';
    if (c == ' ' && (out.empty() || out.back() == ' ')) continue;
    out += c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::string mnemonic_of(const std::string& text) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(' ', start);
    std::string word = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (word.empty() || word.front() != '{') return word;  // skip {vex}, {evex}
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return text;
}

}  // namespace

std::vector<Instruction> disassemble(const std::string& object) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetDisassembler();
  auto buffer = llvm::MemoryBuffer::getMemBuffer(object, "kernel", false);
  auto file = llvm::object::ObjectFile::createObjectFile(buffer->getMemBufferRef());
  if (!file) fail("not an object file: " + llvm::toString(file.takeError()));
  const llvm::Triple triple = (*file)->makeTriple();
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple.str(), error);
  if (!target) fail(error);
  std::unique_ptr<llvm::MCRegisterInfo> regs(target->createMCRegInfo(triple.str()));
  llvm::MCTargetOptions options;
  std::unique_ptr<llvm::MCAsmInfo> asm_info(target->createMCAsmInfo(*regs, triple.str(), options));
  // Every instruction family any tessera target may emit, so that all of them decode.
  std::unique_ptr<llvm::MCSubtargetInfo> subtarget(target->createMCSubtargetInfo(
      triple.str(), "x86-64-v4", "+avx512bf16,+avx512vnni,+avxvnni,+amx-tile,+amx-bf16,+amx-int8"));
  std::unique_ptr<llvm::MCInstrInfo> instrs(target->createMCInstrInfo());
  if (!regs || !asm_info || !subtarget || !instrs) fail("no MC layer for " + triple.str());
  llvm::MCContext context(triple, asm_info.get(), regs.get(), subtarget.get());
  std::unique_ptr<llvm::MCDisassembler> decoder(target->createMCDisassembler(*subtarget, context));
  std::unique_ptr<llvm::MCInstPrinter> printer(
      target->createMCInstPrinter(triple, /*Intel syntax*/ 1, *asm_info, *instrs, *regs));
  if (!decoder || !printer) fail("no disassembler for " + triple.str());

  std::vector<Instruction> out;
  for (const llvm::object::SectionRef& section : (*file)->sections()) {
    if (!section.isText()) continue;
    llvm::Expected<llvm::StringRef> contents = section.getContents();
    if (!contents) fail(llvm::toString(contents.takeError()));
    llvm::ArrayRef<uint8_t> bytes(reinterpret_cast<const uint8_t*>(contents->data()), contents->size());
    for (uint64_t at = 0; at < bytes.size();) {
      llvm::MCInst inst;
      uint64_t size = 0;
      if (decoder->getInstruction(inst, size, bytes.slice(at), at, llvm::nulls()) != llvm::MCDisassembler::Success) {
        out.push_back({"(bad)", "(bad)"});
        at += size ? size : 1;
        continue;
      }
      std::string text;
      llvm::raw_string_ostream os(text);
      printer->printInst(&inst, at, "", *subtarget, os);
      os.flush();
      std::string tidied = tidy(text);
      out.push_back({mnemonic_of(tidied), tidied});
      at += size;
    }
  }
  return out;
}

}  // namespace tessera::jit
