#include "jit/llvm/engine.h"

#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/SubtargetFeature.h>

#include <fmt/format.h>

#include <map>
#include <mutex>

#include "jit/ir/diagnostics.h"
#include "runtime/kernel_abi.h"

namespace tessera::jit {

namespace {

[[noreturn]] void fail(const std::string& what, llvm::Error err) {
  throw InternalError("jit engine", what + ": " + llvm::toString(std::move(err)));
}

template <class T>
T take(llvm::Expected<T> value, const char* what) {
  if (!value) fail(what, value.takeError());
  return std::move(*value);
}

}  // namespace

struct Engine::Impl {
  // For optimisation and object emission, per target (CpuTargets live as long as the process).
  std::map<const CpuTarget*, std::unique_ptr<llvm::TargetMachine>> machines;
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::mutex mutex;  // the target machines and the JIT are used by one thread at a time
  uint64_t next_dylib = 0;

  // The TargetMachine for `t`, made on first use; call with `mutex` held. The CPU name and the
  // complete feature string are both set: a feature string alone would leave the CPU's own
  // features on, a CPU name alone would keep the host's features (research: cpu_kernels.md §4.2).
  llvm::TargetMachine& machine(const CpuTarget& t) {
    std::unique_ptr<llvm::TargetMachine>& m = machines[&t];
    if (!m) {
      llvm::orc::JITTargetMachineBuilder jtmb{llvm::Triple(t.triple)};
      jtmb.setCPU(t.cpu);
      jtmb.getFeatures() = llvm::SubtargetFeatures(t.features);
      jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Default);
      // Kernels call the runtime and libm by symbol; the small code model and PIC keep objects
      // relocatable and loadable anywhere.
      jtmb.setRelocationModel(llvm::Reloc::PIC_);
      m = take(jtmb.createTargetMachine(), "creating the target machine");
    }
    return *m;
  }
};

// Each loaded object lives in a JITDylib of its own (linked against the main one, where the runtime
// and process symbols are), so loading a kernel again while an old copy is being unloaded never
// clashes on its symbol.
class LoadedKernelObject : public LoadedObject {
 public:
  LoadedKernelObject(Engine::Impl& impl, llvm::orc::JITDylib& dylib, void* address)
      : impl_(impl), dylib_(dylib), address_(address) {}
  ~LoadedKernelObject() override {
    std::lock_guard lock(impl_.mutex);
    llvm::consumeError(impl_.jit->getExecutionSession().removeJITDylib(dylib_));
  }
  void* address() const override { return address_; }

 private:
  Engine::Impl& impl_;
  llvm::orc::JITDylib& dylib_;
  void* address_;
};

Engine& Engine::get() {
  // Never destroyed: loaded kernels may outlive static destruction order, and the process exits anyway.
  static Engine* engine = new Engine();
  return *engine;
}

Engine::Engine() : impl_(std::make_unique<Impl>()) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  llvm::InitializeNativeTargetAsmParser();

  // The JIT itself only links and loads objects: it never compiles, so the host description is all
  // it needs.
  auto jtmb = take(llvm::orc::JITTargetMachineBuilder::detectHost(), "detecting the host CPU");
  jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Default);
  jtmb.setRelocationModel(llvm::Reloc::PIC_);
  impl_->jit = take(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(jtmb).create(), "creating the JIT");
  auto& jit = *impl_->jit;
  llvm::orc::SymbolMap symbols;
  for (auto [name, address] : rt::kernel_abi_symbols())
    symbols[jit.mangleAndIntern(llvm::StringRef(name.data(), name.size()))] = {
        llvm::orc::ExecutorAddr::fromPtr(address), llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable};
  if (auto err = jit.getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(symbols))))
    fail("binding the runtime ABI", std::move(err));
  jit.getMainJITDylib().addGenerator(take(
      llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(jit.getDataLayout().getGlobalPrefix()),
      "resolving process symbols"));
}

void Engine::configure(llvm::Module& module, const CpuTarget& target) const {
  std::lock_guard lock(impl_->mutex);
  module.setTargetTriple(target.triple);
  module.setDataLayout(impl_->machine(target).createDataLayout());
}

std::string Engine::compile(llvm::Module& module, const CpuTarget& target) const {
  std::lock_guard lock(impl_->mutex);
  llvm::TargetMachine& machine = impl_->machine(target);
  // The loop vectoriser picks its width from the CPU's tuning, and Intel CPUs prefer 256 bits even
  // with AVX-512; the target's vector width decides instead, so element-wise loops use zmm
  // registers wherever the target has them.
  for (llvm::Function& f : module)
    if (!f.isDeclaration() && !f.hasFnAttribute("prefer-vector-width"))
      f.addFnAttr("prefer-vector-width", std::to_string(target.vector_bits));
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions tuning;
  tuning.LoopVectorization = true;
  tuning.SLPVectorization = true;
  llvm::PassBuilder pb(&machine, tuning);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2).run(module, mam);

  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream out(buffer);
  llvm::legacy::PassManager codegen;
  if (machine.addPassesToEmitFile(codegen, out, nullptr, llvm::CodeGenFileType::ObjectFile))
    throw InternalError("jit engine", "the target cannot emit object files");
  codegen.run(module);
  return std::string(buffer.begin(), buffer.end());
}

std::unique_ptr<LoadedObject> Engine::load(const std::string& object, const std::string& symbol) {
  std::lock_guard lock(impl_->mutex);
  auto& jit = *impl_->jit;
  auto& es = jit.getExecutionSession();
  auto dylib = es.createJITDylib(fmt::format("{}.{}", symbol, impl_->next_dylib++));
  if (!dylib) {
    llvm::consumeError(dylib.takeError());
    return nullptr;
  }
  dylib->addToLinkOrder(jit.getMainJITDylib());
  auto unload = [&] { llvm::consumeError(es.removeJITDylib(*dylib)); };
  if (auto err = jit.addObjectFile(*dylib, llvm::MemoryBuffer::getMemBufferCopy(object, symbol))) {
    llvm::consumeError(std::move(err));
    unload();
    return nullptr;
  }
  auto address = jit.lookup(*dylib, symbol);
  if (!address) {
    llvm::consumeError(address.takeError());
    unload();
    return nullptr;
  }
  return std::make_unique<LoadedKernelObject>(*impl_, *dylib, address->toPtr<void*>());
}

}  // namespace tessera::jit
