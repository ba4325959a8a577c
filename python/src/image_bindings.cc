// Python bindings of the image layer: load_image, resize_image (the PIL-identical resize and its
// double-precision reference, for the conformance tests) and ImageProcessor. Errors raise
// ValueError with the Status message (MemoryError when memory ran out).
#include <pybind11/stl.h>

#include <string>

#include "bindings.h"
#include "tessera/image.h"

namespace tessera::py_bind {
namespace {

using U8Array = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;

template <typename T>
T Take(StatusOr<T> s) {
  ThrowIfError(s.status());
  return std::move(s.value());
}

image::Family FamilyFromName(const std::string& name) {
  if (name == "gemma3") return image::Family::kGemma3;
  if (name == "gemma4") return image::Family::kGemma4;
  if (name == "gemma4_unified") return image::Family::kGemma4Unified;
  throw py::value_error("unknown image processor family '" + name + "' (gemma3, gemma4, gemma4_unified)");
}

image::Resample FilterFromName(const std::string& name) {
  if (name == "bilinear") return image::Resample::kBilinear;
  if (name == "bicubic") return image::Resample::kBicubic;
  throw py::value_error("unknown resample filter '" + name + "' (bilinear, bicubic)");
}

py::array_t<uint8_t> ToNumpy(const image::Image& img) {
  py::array_t<uint8_t> a({img.height, img.width, int64_t{3}});
  std::copy(img.rgb.begin(), img.rgb.end(), a.mutable_data());
  return a;
}

// [H, W] gray, or [H, W, C] with C 1, 3 or 4.
image::Image FromNumpy(const U8Array& a) {
  if (a.ndim() != 2 && a.ndim() != 3) throw py::value_error("image array must be [H, W] or [H, W, C] uint8");
  const int64_t channels = a.ndim() == 2 ? 1 : a.shape(2);
  return Take(image::ImageFromPixels(a.data(), a.shape(0), a.shape(1), channels));
}

image::Image Load(const std::string& path) {
  StatusOr<image::Image> img = InvalidArgument("");
  {
    py::gil_scoped_release release;
    img = image::LoadImageFile(path);
  }
  return Take(std::move(img));
}

py::dict Process(const image::ImageProcessor& p, const py::object& input, int64_t budget) {
  const image::Image img = py::isinstance<py::str>(input) ? Load(input.cast<std::string>())
                                                          : FromNumpy(input.cast<U8Array>());
  StatusOr<image::PixelInput> out = InvalidArgument("");
  {
    py::gil_scoped_release release;
    out = p.Process(img, budget);
  }
  const image::PixelInput& r = Take(std::move(out));
  py::array_t<float> pixels(r.shape);
  std::copy(r.pixels.begin(), r.pixels.end(), pixels.mutable_data());
  py::array_t<int32_t> positions({static_cast<int64_t>(r.positions.size() / 2), int64_t{2}});
  std::copy(r.positions.begin(), r.positions.end(), positions.mutable_data());
  py::dict d;
  d["pixels"] = pixels;
  d["positions"] = positions;
  d["valid_rows"] = r.valid_rows;
  d["soft_tokens"] = r.soft_tokens;
  return d;
}

}  // namespace

void BindImage(py::module_& m) {
  m.def("load_image", [](const std::string& path) { return ToNumpy(Load(path)); }, py::arg("path"),
        "Decodes a JPEG or PNG file to uint8 [H, W, 3] RGB, as PIL's open().convert('RGB') after exif_transpose.");
  m.def(
      "resize_image",
      [](const U8Array& a, int64_t height, int64_t width, const std::string& filter, bool reference) {
        const image::Image img = FromNumpy(a);
        const image::Resample f = FilterFromName(filter);
        return ToNumpy(Take(reference ? image::ResizeImageReference(img, height, width, f)
                                      : image::ResizeImage(img, height, width, f)));
      },
      py::arg("image"), py::arg("height"), py::arg("width"), py::arg("filter") = "bicubic", py::arg("reference") = false,
      "PIL's Image.resize (bilinear/bicubic) of a uint8 [H, W, 3] array; reference=True: the double-precision one.");

  py::class_<image::ImageProcessor>(m, "ImageProcessor")
      .def_static(
          "from_checkpoint",
          [](const std::string& dir, const std::string& family) {
            return Take(image::ImageProcessor::FromCheckpoint(dir, FamilyFromName(family)));
          },
          py::arg("dir"), py::arg("family"))
      .def_static(
          "from_dict",
          [](const py::dict& fields, const std::string& family) {
            const std::string json = py::module_::import("json").attr("dumps")(fields).cast<std::string>();
            return Take(image::ImageProcessor::FromJson(json, FamilyFromName(family), "<dict>"));
          },
          py::arg("fields"), py::arg("family"))
      .def(
          "soft_tokens",
          [](const image::ImageProcessor& p, int64_t h, int64_t w, int64_t budget) {
            return Take(p.SoftTokens(h, w, budget));
          },
          py::arg("height"), py::arg("width"), py::arg("budget") = 0)
      .def(
          "target_size",
          [](const image::ImageProcessor& p, int64_t h, int64_t w, int64_t budget) {
            const image::ImageSize s = Take(p.TargetSize(h, w, budget));
            return py::make_tuple(s.height, s.width);
          },
          py::arg("height"), py::arg("width"), py::arg("budget") = 0)
      .def("process", &Process, py::arg("image"), py::arg("budget") = 0,
           "image: uint8 [H, W(, C)] array or a file path. Returns dict(pixels, positions, valid_rows, soft_tokens).");
}

}  // namespace tessera::py_bind
