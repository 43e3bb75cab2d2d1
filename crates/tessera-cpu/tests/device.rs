//! The CPU device, family, registry entry and events.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cpu_util;

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tessera::{Device, DeviceType, Event, HostMemory, Registry, same_buffer_type};
use tessera_cpu::{CpuEvent, CpuStream};

#[test]
fn registry_finds_the_cpu() {
    tessera_cpu::register();
    tessera_cpu::register();
    let reg = Registry::global();
    let cpus = reg
        .devices()
        .into_iter()
        .filter(|d| d.name() == "CPU")
        .count();
    assert_eq!(cpus, 1, "registering twice adds one device");
    let dev = reg.device_by_name("cpu").unwrap();
    assert_eq!(dev.name(), "CPU");
    assert_eq!(dev.device_type(), DeviceType::Cpu);
    assert_eq!(dev.family_name(), "CPU");
    // It is the process-wide device.
    assert!(std::ptr::addr_eq(
        Arc::as_ptr(&dev),
        Arc::as_ptr(&tessera_cpu::device())
    ));
    let stream = reg.init_best().unwrap();
    assert_eq!(stream.name(), "CPU");
    assert_eq!(stream.device().name(), "CPU");
    let fam = reg.family_by_name("CPU").unwrap();
    assert_eq!(fam.devices().len(), 1);
    let features = fam.features();
    assert!(features.iter().all(|(_, v)| v == "1"));
    #[cfg(target_arch = "x86_64")]
    assert_eq!(
        features.iter().any(|(n, _)| n == "AVX2"),
        std::arch::is_x86_feature_detected!("avx2")
    );
}

#[test]
fn props_caps_and_memory() {
    let dev = tessera_cpu::device();
    let p = dev.props();
    assert_eq!(p.name, "CPU");
    assert!(!p.description.is_empty());
    assert!(!p.caps.async_ops && p.caps.events && p.caps.buffer_from_host_memory);
    let m = p.memory;
    if !m.estimated {
        assert!(m.total > 0 && m.free <= m.total, "{m:?}");
    }
    let buft = dev.buffer_type();
    assert_eq!(buft.name(), "CPU");
    assert!(buft.is_host());
    assert!(dev.supports_buffer_type(buft.as_ref()));
    assert_eq!(buft.device().unwrap().name(), "CPU");
    assert!(same_buffer_type(buft.as_ref(), dev.buffer_type().as_ref()));
}

#[test]
fn host_memory_becomes_a_cpu_buffer() {
    let dev = tessera_cpu::device();
    let data: Vec<u8> = (0..100u8).collect();
    let buf = dev
        .buffer_from_host_memory(HostMemory::borrowed_mut(data), 100)
        .unwrap();
    assert_eq!(buf.size(), 100);
    assert!(buf.is_host() && buf.host_region().is_some());
    let mut out = [0u8; 4];
    buf.read(96, &mut out).unwrap();
    assert_eq!(out, [96, 97, 98, 99]);
    buf.write(0, &[9]).unwrap();
    buf.read(0, &mut out[..1]).unwrap();
    assert_eq!(out[0], 9);
    assert_eq!(buf.buffer_type().name(), "CPU");
}

/// An event of another device: records refused, waits go through the host.
#[derive(Debug, Default)]
struct ForeignEvent {
    host_waits: AtomicUsize,
}

impl Event for ForeignEvent {
    fn device_name(&self) -> &str {
        "Elsewhere"
    }
    fn synchronize(&self) -> tessera::Result<()> {
        self.host_waits.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn is_signaled(&self) -> tessera::Result<bool> {
        Ok(true)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[test]
fn events_record_natively_and_foreign_ones_fall_back() {
    let dev = tessera_cpu::device();
    let stream = dev
        .new_stream(&tessera::StreamOptions::new().threads(1))
        .unwrap();
    let ev = dev.new_event().unwrap();
    assert!(
        ev.is_signaled().unwrap(),
        "a never recorded event counts as signalled"
    );
    stream.record_event(ev.as_ref()).unwrap();
    stream.record_event(ev.as_ref()).unwrap();
    assert_eq!(
        ev.as_any()
            .downcast_ref::<CpuEvent>()
            .unwrap()
            .record_count(),
        2
    );
    stream.wait_event(ev.as_ref()).unwrap();
    ev.synchronize().unwrap();
    assert!(ev.is_signaled().unwrap());
    let foreign = ForeignEvent::default();
    assert!(stream.record_event(&foreign).is_err());
    stream.wait_event(&foreign).unwrap();
    assert_eq!(foreign.host_waits.load(Ordering::SeqCst), 1);
    assert!(stream.as_any().downcast_ref::<CpuStream>().is_some());
}
