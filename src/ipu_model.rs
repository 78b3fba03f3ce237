//! The IPU Model as a device for the Rust frontend ([`frontend::device::Device`]): a model's
//! step programs compile to resident device loops (weights stay on the device between
//! executions) and run through [`LoadedModule`].

use crate::device::LoadedModule;
use compiler::{DeviceLoop, IpuConfig, PassOptions};
use frontend::device::{Device, DeviceError, LoadedStep, PipelineProgram, StepProgram};
use runtime::EngineOptions;
use xla_ir::Literal;
use xla_ir::literal::ArrayLiteral;

/// Runs a frontend model's steps on the IPU Model of `config`.
#[derive(Debug, Clone, Default)]
pub struct IpuModel {
    /// The IPU system and compiler options.
    pub config: IpuConfig,
    /// Pass-pipeline options (dumps).
    pub options: PassOptions,
}

impl IpuModel {
    /// The IPU Model of `config`.
    pub fn new(config: IpuConfig) -> IpuModel {
        IpuModel {
            config,
            options: PassOptions::default(),
        }
    }
}

struct LoadedIpuStep {
    loaded: LoadedModule,
    replicas: usize,
    cycles: Option<u64>,
}

impl Device for IpuModel {
    fn name(&self) -> String {
        format!("the IPU Model ({})", self.config.ipu_model.version)
    }

    fn runs_pipelines(&self) -> bool {
        true
    }

    fn load_pipeline(
        &mut self,
        program: PipelineProgram,
    ) -> Result<Box<dyn LoadedStep>, DeviceError> {
        use compiler::training_pipeline::{Optimizer, TrainingPipeline, compile_training_pipeline};
        let stages = program
            .stages
            .into_iter()
            .map(crate::pipeline::loss::training_stage)
            .collect();
        let mut pipeline = TrainingPipeline::new(
            stages,
            Optimizer::PerStage(program.updates),
            program.gradient_accumulation,
        );
        pipeline.repeat_count = program.repeat_count;
        let to_error = |e: &dyn std::fmt::Display| -> DeviceError { e.to_string().into() };
        let shapes = pipeline.check().map_err(|e| to_error(&e))?;
        let last = shapes.last().expect("a checked pipeline has stages");
        let declared = last
            .outputs
            .iter()
            .chain(shapes.iter().flat_map(|s| &s.weights))
            .cloned()
            .collect();
        let compiled =
            compile_training_pipeline(&pipeline, &self.config).map_err(|e| to_error(&e))?;
        let lp = DeviceLoop {
            iterations: pipeline.micro_batches(),
            fed: Vec::new(),
            resident: false,
        };
        let (mut loaded, _) = LoadedModule::from_compiled(
            compiled,
            declared,
            Some(lp),
            EngineOptions::default(),
            None,
        )
        .map_err(|e| to_error(&format!("{e:#}")))?;
        loaded.outfeed_mode = crate::device_loop::OutfeedMode::All;
        Ok(Box::new(LoadedIpuStep {
            loaded,
            replicas: 1,
            cycles: None,
        }))
    }

    fn load(&mut self, program: StepProgram) -> Result<Box<dyn LoadedStep>, DeviceError> {
        let lp = DeviceLoop {
            iterations: program.iterations,
            fed: program.fed.clone(),
            resident: program.carried.iter().any(Option::is_some),
        };
        let (loaded, _) = LoadedModule::load_device_loop(
            &program.module,
            &self.config,
            &self.options,
            EngineOptions::default(),
            lp,
        )
        .map_err(|e| -> DeviceError { format!("{e:#}").into() })?;
        Ok(Box::new(LoadedIpuStep {
            loaded,
            replicas: program.replicas,
            cycles: None,
        }))
    }
}

impl LoadedStep for LoadedIpuStep {
    fn run(&mut self, inputs: &[Vec<Literal>]) -> Result<Vec<Vec<ArrayLiteral>>, DeviceError> {
        let to_error = |e: anyhow::Error| -> DeviceError { format!("{e:#}").into() };
        if self.replicas == 1 {
            let (outputs, profile) = self.loaded.run(&inputs[0]).map_err(to_error)?;
            self.cycles = Some(profile.total_cycles);
            return Ok(vec![outputs]);
        }
        let (outputs, profiles) = self.loaded.run_replicated(inputs).map_err(to_error)?;
        self.cycles = profiles.iter().map(|p| p.total_cycles).max();
        Ok(outputs)
    }

    fn reupload(&mut self) {
        self.loaded.reupload();
    }

    fn last_cycles(&self) -> Option<u64> {
        self.cycles
    }
}
