// Exported models: the graph as JSON (every registered op written and read
// back as it was), the version directory, loading, and every load failure
// named by file and culprit.
#include "cosession/serving/saved_model.h"

#include <gtest/gtest.h>

#include <boost/asio/use_awaitable.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cosession/graph/op_registry.h"
#include "cosession/graph/ops.h"
#include "cosession/graph/optimizers.h"
#include "cosession/io/atomic_file.h"
#include "cosession/io/safetensors.h"
#include "cosession/pipeline/dataset.h"
#include "cosession/pipeline/dataset_iterator.h"
#include "cosession/serving/graph_json.h"
#include "tests/co_test.h"
#include "tests/scratch_dir.h"
#include "tests/test_files.h"
#include "tests/test_util.h"

namespace cosession::saved_model_test {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using Json = nlohmann::json;
using testing::ScratchDir;
using testing::TestRuntime;

// Ops whose attrs hold a host object (a dataset): they cannot be written,
// and GraphToJson says so (HostObjectOpIsRefusedNamingIt).
const std::set<std::string>& HostObjectOps() {
  static const auto* ops = new std::set<std::string>{"IteratorGetNext"};
  return *ops;
}

// A graph holding at least one op of every type the library registers
// (except HostObjectOps()), with every kind of attr.
void BuildEveryOp(Graph& g) {
  g.set_seed(7);
  Output x = ops::Placeholder(g, DType::kFloat, TensorShape{2, 3}, "x");
  Output any =
      ops::Placeholder(g, DType::kInt64, TensorShape::Unknown(), "any");
  (void)any;
  Output w = ops::Variable(
      g, ops::TruncatedNormal(g, TensorShape{3, 3}, DType::kFloat, 0.0, 0.5, 3),
      "w");
  Output b =
      ops::Variable(g, Tensor::FromVector<float>({0.5f, -1.0f, 2.0f}), "b");
  Output d = ops::Variable(g, Tensor::Scalar<double>(1.0), "d", false);
  Output y = ops::Add(g, ops::MatMul(g, x, w, false, true), b, "y");
  Output z =
      ops::Sub(g, ops::Mul(g, y, y), ops::Div(g, y, ops::Const(g, 2.0f)));
  Output m = ops::Maximum(g, ops::Neg(g, z), ops::Square(g, z));
  Output e = ops::AddN(
      g, {ops::Sqrt(g, ops::Exp(g, m)), ops::Log(g, m), ops::Relu(g, m),
          ops::Sigmoid(g, m), ops::Tanh(g, m), ops::Softmax(g, m)});
  Output r = ops::Sum(g, ops::Mean(g, e, {1}, true), {}, false);
  Output mx = ops::Max(g, e, {0}, false);
  Output labels = ops::ArgMax(g, e, 1, "labels");
  Output labels32 = ops::Cast(g, labels, DType::kInt32);
  Output same = ops::Equal(g, labels32, labels32);
  Output finite = ops::IsFinite(g, e);
  Output checked = ops::CheckNumerics(g, e, "e has a NaN");
  Output reshaped = ops::Reshape(g, ops::Transpose(g, checked, {1, 0}),
                                 TensorShape{3, -1}, "reshaped");
  Output filled = ops::Fill(g, TensorShape{2, 2}, ops::Const(g, 1.5f));
  Output zeros = ops::ZerosLike(g, filled);
  Output ones = ops::OnesLike(g, filled);
  Output uniform = ops::RandomUniform(g, TensorShape{2}, DType::kFloat, 5);
  Output normal =
      ops::RandomNormal(g, TensorShape{2}, DType::kDouble, 1.0, 2.0);
  std::vector<Output> xent =
      ops::SparseSoftmaxCrossEntropyWithLogits(g, e, labels, "xent");
  Output sum_to = ops::SumToShapeOf(g, e, b);
  Output reshape_to = ops::ReshapeToShapeOf(g, reshaped, e);
  Output sum_grad = ops::SumGrad(g, r, e, {}, false);
  Output mean_grad = ops::MeanGrad(g, mx, e, {0}, false);
  Output max_grad = ops::MaxGrad(g, mx, e, mx, {0}, false);
  std::vector<Output> maximum_grad = ops::MaximumGrad(g, m, z, z);
  Output relu_grad = ops::ReluGrad(g, e, e);
  Output sigmoid_grad = ops::SigmoidGrad(g, e, e);
  Output tanh_grad = ops::TanhGrad(g, e, e);
  Output softmax_grad = ops::SoftmaxGrad(g, e, e);
  Output step = GetOrCreateGlobalStep(g);
  Output lr = ops::Const(g, 0.1f, "lr");
  Output grad = ops::Const(g, Tensor::FromVector<float>({1, 2, 3}), "grad");
  Output acc = ops::Variable(g, Tensor(DType::kFloat, TensorShape{3}), "acc");
  Output m1 = ops::Variable(g, Tensor(DType::kFloat, TensorShape{3}), "m1");
  Output v1 = ops::Variable(g, Tensor(DType::kFloat, TensorShape{3}), "v1");
  Output half = ops::Const(g, 0.5f);
  Operation sgd = ops::ApplyGradientDescent(g, b, lr, grad, "sgd");
  Operation momentum =
      ops::ApplyMomentum(g, b, acc, lr, grad, half, true, "momentum");
  Operation adam = ops::ApplyAdam(g, b, m1, v1, half, half, lr, half, half,
                                  half, grad, "adam");
  Output assigned = ops::Assign(g, d, ops::Const(g, 2.0));
  Output added = ops::AssignAdd(g, step, ops::Const<int64_t>(g, 1));
  Output subtracted = ops::AssignSub(g, d, ops::Const(g, 0.5));
  Output report = ReportUninitializedVariables(g);
  Operation init = GlobalVariablesInitializer(g);
  Operation all = ops::Group(
      g,
      {sgd, momentum, adam, Operation(assigned.node()), Operation(added.node()),
       Operation(subtracted.node()), Operation(report.node()), init},
      "all");
  ops::WithControlDependencies(g, {all}, ops::Identity(g, r), "last");
  for (Output o : {same, finite, zeros, ones, uniform, normal, xent[0], sum_to,
                   reshape_to, sum_grad, mean_grad, max_grad, maximum_grad[0],
                   relu_grad, sigmoid_grad, tanh_grad, softmax_grad}) {
    ops::Identity(g, o);
  }
}

std::string Names(absl::Span<const Output> outputs) {
  std::string names;
  for (const Output& o : outputs) absl::StrAppend(&names, o.name(), " ");
  return names;
}

// Equal values; NaNs equal, tensors equal element by element.
bool SameAttr(const AttrValue& a, const AttrValue& b) {
  if (a.index() != b.index()) return false;
  if (const Tensor* t = std::get_if<Tensor>(&a)) {
    const Tensor& u = std::get<Tensor>(b);
    return t->dtype() == u.dtype() && t->shape() == u.shape() &&
           t->TotalBytes() == u.TotalBytes() &&
           (t->TotalBytes() == 0 ||
            std::memcmp(t->raw_data(), u.raw_data(), t->TotalBytes()) == 0);
  }
  if (const double* x = std::get_if<double>(&a)) {
    const double y = std::get<double>(b);
    return *x == y || (std::isnan(*x) && std::isnan(y));
  }
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Tensor> || std::is_same_v<T, double>) {
          return false;  // handled above
        } else {
          return x == std::get<T>(b);
        }
      },
      a);
}

// Every node of `a` has its twin in `b`: same name, op, inputs, control
// inputs, attrs (node ids compared by the names they refer to), output
// dtypes and shapes.
void ExpectSameGraph(const Graph& a, const Graph& b) {
  ASSERT_EQ(a.num_nodes(), b.num_nodes());
  for (int id = 0; id < a.num_nodes(); ++id) {
    const Node& x = *a.node(id);
    const Node* y = b.FindNode(x.name());
    ASSERT_NE(y, nullptr) << x.name();
    SCOPED_TRACE(x.name());
    EXPECT_EQ(x.type(), y->type());
    EXPECT_EQ(Names(x.inputs()), Names(y->inputs()));
    ASSERT_EQ(x.control_inputs().size(), y->control_inputs().size());
    for (size_t i = 0; i < x.control_inputs().size(); ++i) {
      EXPECT_EQ(x.control_inputs()[i]->name(), y->control_inputs()[i]->name());
    }
    ASSERT_EQ(x.num_outputs(), y->num_outputs());
    for (int i = 0; i < x.num_outputs(); ++i) {
      EXPECT_EQ(x.output_dtype(i), y->output_dtype(i));
      EXPECT_EQ(x.output_shape(i), y->output_shape(i));
    }
    ASSERT_EQ(x.attrs().size(), y->attrs().size());
    const auto& node_attrs = x.op_def().node_id_attrs;
    for (const auto& [name, value] : x.attrs()) {
      auto it = y->attrs().find(name);
      ASSERT_NE(it, y->attrs().end()) << name;
      if (std::find(node_attrs.begin(), node_attrs.end(), name) !=
          node_attrs.end()) {
        EXPECT_EQ(
            a.node(static_cast<int>(std::get<int64_t>(value)))->name(),
            b.node(static_cast<int>(std::get<int64_t>(it->second)))->name());
      } else {
        EXPECT_TRUE(SameAttr(value, it->second)) << name;
      }
    }
  }
  for (const std::string& key : a.CollectionKeys()) {
    std::vector<std::string> xs, ys;
    for (const Node* n : a.GetCollection(key)) xs.push_back(n->name());
    for (const Node* n : b.GetCollection(key)) ys.push_back(n->name());
    EXPECT_EQ(xs, ys) << key;
  }
  EXPECT_EQ(a.seed(), b.seed());
}

absl::StatusOr<Json> WrittenAndParsed(const Graph& g) {
  COSESSION_ASSIGN_OR_RETURN(Json json, GraphToJson(g, {}));
  return Json::parse(json.dump());
}

TEST(GraphJson, EveryRegisteredOpRoundTrips) {
  Graph g;
  BuildEveryOp(g);
  std::set<std::string> in_graph;
  for (int id = 0; id < g.num_nodes(); ++id)
    in_graph.insert(g.node(id)->type());
  // The library's ops: what OpRegistry::Global() registers
  // (graph/op_registry.cc), in a registry of their own -- the global one
  // also holds the ops other test suites of this binary registered.
  OpRegistry library;
  RegisterCoreOps(library);
  RegisterMathOps(library);
  RegisterMatMulOp(library);
  RegisterArrayOps(library);
  RegisterRandomOps(library);
  RegisterTrainingOps(library);
  RegisterNnOps(library);
  RegisterGradOps(library);
  RegisterGradients(library);
  std::vector<std::string> ops = library.OpNames();
  ops.push_back("IteratorGetNext");  // the pipeline layer's
  for (const std::string& op : ops) {
    EXPECT_TRUE(in_graph.contains(op) || HostObjectOps().contains(op))
        << "op " << op << " has no round-trip case in BuildEveryOp";
  }
  absl::StatusOr<Json> json = WrittenAndParsed(g);
  ASSERT_TRUE(json.ok()) << json.status();
  Graph loaded;
  ASSERT_TRUE(GraphFromJson(*json, "every_op.json", loaded).ok());
  ExpectSameGraph(g, loaded);
  // Written again, the loaded graph gives the same text.
  absl::StatusOr<Json> again = GraphToJson(loaded, {});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(json->dump(), again->dump());
}

TEST(GraphJson, AttrValuesSurviveExactly) {
  Graph g;
  ops::Const(
      g,
      Tensor::FromVector<float>({1.0f / 3, -0.0f, 1e-38f,
                                 std::numeric_limits<float>::infinity(),
                                 std::numeric_limits<float>::quiet_NaN()}),
      "floats");
  Tensor bools(DType::kBool, TensorShape{2});
  bools.mutable_flat<bool>()[0] = true;
  bools.mutable_flat<bool>()[1] = false;
  ops::Const(g, bools, "bools");
  ops::Const(g, Tensor::Scalar<int64_t>(std::numeric_limits<int64_t>::min()),
             "int_min");
  ops::Const(g, Tensor(DType::kInt32, TensorShape{0, 4}), "empty");
  ops::RandomNormal(g, TensorShape{1}, DType::kFloat, 0.1, 1e300, 0, "normal");
  absl::StatusOr<Json> json = WrittenAndParsed(g);
  ASSERT_TRUE(json.ok()) << json.status();
  Graph loaded;
  ASSERT_TRUE(GraphFromJson(*json, "attrs.json", loaded).ok());
  ExpectSameGraph(g, loaded);
  const Tensor& floats = loaded.FindNode("floats")->attr<Tensor>("value");
  EXPECT_EQ(floats.flat<float>()[0], 1.0f / 3);
  EXPECT_TRUE(std::signbit(floats.flat<float>()[1]));
  EXPECT_TRUE(std::isnan(floats.flat<float>()[4]));
  EXPECT_EQ(loaded.FindNode("normal")->attr<double>("stddev"), 1e300);
}

TEST(GraphJson, NodeIdAttrsFollowTheirNodeWhenPruned) {
  Graph g;
  ops::Const(g, 1.0f, "unused_a");
  ops::Const(g, 2.0f, "unused_b");
  Output v = ops::Variable(g, Tensor::Scalar<float>(0), "v");
  Output bump = ops::AssignAdd(g, v, ops::Const(g, 1.0f, "one"), "bump");
  absl::StatusOr<Json> json = GraphToJson(g, {.roots = {bump.node()}});
  ASSERT_TRUE(json.ok()) << json.status();
  Graph loaded;
  ASSERT_TRUE(GraphFromJson(*json, "pruned.json", loaded).ok());
  EXPECT_EQ(loaded.FindNode("unused_a"), nullptr);
  const Node* variable = loaded.FindNode("v");
  ASSERT_NE(variable, nullptr);
  EXPECT_NE(variable->id(), v.node()->id());  // the ids did change
  EXPECT_EQ(loaded.FindNode("bump")->attr<int64_t>("variable"), variable->id());
}

TEST(GraphJson, HostObjectOpIsRefusedNamingIt) {
  Graph g;
  Dataset rows = Dataset::FromTensorSlices(
      {Tensor::FromVector<float>({1, 2, 3, 4}, TensorShape{2, 2})});
  std::vector<Output> next = IteratorGetNext(g, rows, "input");
  Output y = ops::Mul(g, next[0], ops::Const(g, 2.0f), "y");
  absl::StatusOr<Json> json = GraphToJson(g, {.roots = {y.node()}});
  ASSERT_FALSE(json.ok());
  EXPECT_EQ(json.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(json.status().message(), "'input'"))
      << json.status();
  EXPECT_TRUE(absl::StrContains(json.status().message(), "host object"));
  // Cut there, the rest is written, the input a Placeholder of any batch.
  json = GraphToJson(
      g, {.roots = {y.node()},
          .cuts = {{.tensor = next[0], .placeholder_name = "rows"}}});
  ASSERT_TRUE(json.ok()) << json.status();
  Graph loaded;
  ASSERT_TRUE(GraphFromJson(*json, "cut.json", loaded).ok());
  EXPECT_EQ(loaded.num_nodes(), 3);  // rows, the constant, y
  EXPECT_EQ(loaded.FindNode("rows")->type(), "Placeholder");
  // The rows are [2]-vectors: a batch of them, any number.
  EXPECT_EQ(loaded.FindNode("y")->output_shape(0).DebugString(), "[?]");
}

// A valid file to break in one place.
Json SmallGraphJson() {
  Graph g;
  Output x = ops::Placeholder(g, DType::kFloat, TensorShape{-1, 2}, "x");
  Output w = ops::Variable(
      g, Tensor::FromVector<float>({1, 2, 3, 4}, TensorShape{2, 2}), "w");
  ops::MatMul(g, x, w, false, false, "y");
  return *GraphToJson(g, {});
}

struct LoadFailure {
  std::string what;
  std::function<void(Json&)> damage;
  absl::StatusCode code;
  std::string message_part;
};

TEST(GraphJson, EveryLoadFailureNamesFileAndCulprit) {
  // Node 0 is x, 1 w/initial_value, 2 w, 3 w/Assign, 4 y.
  const std::vector<LoadFailure> cases = {
      {"unknown op", [](Json& j) { j["nodes"][4]["op"] = "FancyMatMul"; },
       absl::StatusCode::kNotFound, "'y' has op type 'FancyMatMul'"},
      {"no op", [](Json& j) { j["nodes"][4].erase("op"); },
       absl::StatusCode::kDataLoss, "'y' has no \"op\""},
      {"not a graph", [](Json& j) { j = Json::array(); },
       absl::StatusCode::kDataLoss, "not a JSON object"},
      {"other format version", [](Json& j) { j["format_version"] = 2; },
       absl::StatusCode::kDataLoss, "format_version"},
      {"unknown input", [](Json& j) { j["nodes"][4]["inputs"][0] = "nope:0"; },
       absl::StatusCode::kDataLoss, "input 'nope:0'"},
      {"input after its user",
       [](Json& j) { std::swap(j["nodes"][0], j["nodes"][4]); },
       absl::StatusCode::kDataLoss, "'y': input 'x:0'"},
      {"duplicate name", [](Json& j) { j["nodes"][4]["name"] = "x"; },
       absl::StatusCode::kDataLoss, "'x' is defined twice"},
      {"attr of unknown type",
       [](Json& j) {
         j["nodes"][4]["attrs"]["transpose_a"] = {{"complex", 1}};
       },
       absl::StatusCode::kDataLoss, "attr 'transpose_a' has the unknown type"},
      {"attr of the wrong type for its op",
       [](Json& j) {
         j["nodes"][4]["attrs"]["transpose_a"] = {{"int", 1}};
       },
       absl::StatusCode::kDataLoss, "'y' (MatMul) does not fit its op"},
      {"bad dtype",
       [](Json& j) {
         j["nodes"][0]["attrs"]["dtype"] = {{"dtype", "float16"}};
       },
       absl::StatusCode::kDataLoss, "attr 'dtype' is not a dtype name"},
      {"shape not a list",
       [](Json& j) {
         j["nodes"][0]["attrs"]["shape"] = {{"shape", 3}};
       },
       absl::StatusCode::kDataLoss, "attr 'shape'"},
      {"tensor data too short",
       [](Json& j) {
         j["nodes"][1]["attrs"]["value"]["tensor"]["data"] = "AAAA";
       },
       absl::StatusCode::kDataLoss, "'w/initial_value': attr 'value'"},
      {"tensor data not base64",
       [](Json& j) {
         j["nodes"][1]["attrs"]["value"]["tensor"]["data"] = "!!";
       },
       absl::StatusCode::kDataLoss, "not base64"},
      {"huge tensor shape",
       [](Json& j) {
         j["nodes"][1]["attrs"]["value"]["tensor"]["shape"] =
             Json::array({1LL << 40, 1LL << 40});
       },
       absl::StatusCode::kDataLoss, "shorter than its shape"},
      {"node attr naming nothing",
       [](Json& j) {
         j["nodes"][3]["attrs"]["variable"] = {{"node", "ghost"}};
       },
       absl::StatusCode::kDataLoss, "'w/Assign': attr 'variable' names no"},
      {"unknown node field",
       [](Json& j) { j["nodes"][4]["device"] = "/gpu:0"; },
       absl::StatusCode::kDataLoss, "unknown field \"device\""},
      {"collection naming nothing",
       [](Json& j) { j["collections"]["variables"][0] = "ghost"; },
       absl::StatusCode::kDataLoss, "collection 'variables'"},
  };
  for (const LoadFailure& c : cases) {
    SCOPED_TRACE(c.what);
    Json json = SmallGraphJson();
    c.damage(json);
    Graph g;
    absl::Status s = GraphFromJson(json, "/models/m/1/model.json", g);
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "/models/m/1/model.json")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), c.message_part)) << s;
  }
}

// ---- saved models ----

struct Mlp {
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  Output input, features, probabilities, classes;
  Operation init;
};

// 64-16-10, its input through an Identity (as an input pipeline's output
// would be), so that export cuts the graph there.
Mlp BuildMlp() {
  Mlp m;
  Graph& g = *m.graph;
  g.set_seed(11);
  m.input = ops::Placeholder(g, DType::kFloat, TensorShape{-1, 64}, "rows");
  m.features = ops::Identity(g, m.input, "features");
  Output w1 = ops::Variable(
      g, ops::RandomNormal(g, TensorShape{64, 16}, DType::kFloat, 0, 0.3),
      "layer1/weights");
  Output b1 = ops::Variable(
      g, ops::RandomNormal(g, TensorShape{16}, DType::kFloat, 0, 0.3),
      "layer1/biases");
  Output w2 = ops::Variable(
      g, ops::RandomNormal(g, TensorShape{16, 10}, DType::kFloat, 0, 0.3),
      "layer2/weights");
  Output hidden = ops::Relu(g, ops::Add(g, ops::MatMul(g, m.features, w1), b1));
  Output logits = ops::MatMul(g, hidden, w2, false, false, "logits");
  m.probabilities = ops::Softmax(g, logits, "probabilities");
  m.classes = ops::ArgMax(g, logits, 1, "classes");
  m.init = GlobalVariablesInitializer(g);
  g.Finalize();
  return m;
}

std::map<std::string, ExportSignature> ServingSignature(const Mlp& m) {
  return {{kDefaultServingSignature,
           {.inputs = {{"x", m.features}},
            .outputs = {{"probabilities", m.probabilities},
                        {"classes", m.classes}}}}};
}

Tensor Rows(int n) {
  std::vector<float> values(static_cast<size_t>(n) * 64);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<float>((i * 37) % 17) / 16.0f;
  }
  return Tensor::FromVector(values, TensorShape{n, 64});
}

asio::awaitable<absl::StatusOr<std::string>> ExportedMlp(const Mlp& m,
                                                         Session& session,
                                                         const std::string& dir,
                                                         int64_t version) {
  RunArgs init{.targets = {m.init}};
  auto initialized = co_await session.Run(init, asio::use_awaitable);
  if (!initialized.ok()) co_return initialized.status();
  co_return co_await ExportSavedModel(session, ServingSignature(m), dir,
                                      version);
}

CO_TEST(SavedModel, LoadedModelPredictsWhatTheExporterPredicted) {
  ScratchDir dir;
  Mlp m = BuildMlp();
  Session session(*m.graph, TestRuntime());
  auto exported = co_await ExportedMlp(m, session, dir.path(), 7);
  CO_ASSERT_OK(exported.status());
  EXPECT_EQ(*exported, dir / "7");
  EXPECT_TRUE(fs::exists(dir / "7/model.json"));
  EXPECT_TRUE(fs::exists(dir / "7/variables.safetensors"));

  auto loaded = co_await LoadSavedModel(*exported, TestRuntime());
  CO_ASSERT_OK(loaded.status());
  const SavedModel& model = **loaded;
  EXPECT_EQ(model.version, 7);
  const Signature* sig = model.FindSignature(kDefaultServingSignature);
  CO_ASSERT_TRUE(sig != nullptr);
  EXPECT_EQ(sig->method_name, "tensorflow/serving/predict");
  CO_ASSERT_TRUE(sig->inputs.size() == 1 && sig->outputs.size() == 2);
  EXPECT_EQ(sig->inputs.at("x").dtype, DType::kFloat);
  EXPECT_EQ(sig->inputs.at("x").shape.DebugString(), "[?,64]");
  EXPECT_EQ(sig->outputs.at("probabilities").shape.DebugString(), "[?,10]");
  EXPECT_EQ(sig->outputs.at("classes").dtype, DType::kInt64);
  EXPECT_EQ(sig->outputs.at("classes").shape.DebugString(), "[?]");
  // Only what the outputs need: no initializers, no random ops.
  for (int id = 0; id < model.graph->num_nodes(); ++id) {
    EXPECT_NE(model.graph->node(id)->type(), "RandomNormal");
  }

  const Tensor rows = Rows(5);
  RunArgs original{.fetches = {m.probabilities, m.classes},
                   .feeds = {{m.input, rows}}};
  auto want = co_await session.Run(original, asio::use_awaitable);
  CO_ASSERT_OK(want.status());
  RunArgs served{.fetches = {sig->outputs.at("probabilities").tensor,
                             sig->outputs.at("classes").tensor},
                 .feeds = {{sig->inputs.at("x").tensor, rows}}};
  auto got = co_await model.session->Run(served, asio::use_awaitable);
  CO_ASSERT_OK(got.status());
  EXPECT_EQ((*want)[0].DebugString(100), (*got)[0].DebugString(100));
  EXPECT_EQ((*want)[1].DebugString(100), (*got)[1].DebugString(100));
  auto p = (*got)[0].flat<float>();
  EXPECT_NEAR(
      p[0] + p[1] + p[2] + p[3] + p[4] + p[5] + p[6] + p[7] + p[8] + p[9], 1.0,
      1e-5);
}

CO_TEST(SavedModel, AVersionIsWrittenOnceAndListedAmongOthers) {
  ScratchDir dir;
  Mlp m = BuildMlp();
  Session session(*m.graph, TestRuntime());
  CO_ASSERT_OK((co_await ExportedMlp(m, session, dir.path(), 3)).status());
  auto again =
      co_await ExportSavedModel(session, ServingSignature(m), dir.path(), 3);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(absl::StrContains(again.status().message(), dir / "3"));
  CO_ASSERT_OK(
      (co_await ExportSavedModel(session, ServingSignature(m), dir.path(), 12))
          .status());
  fs::create_directories(dir / ".tmp-99-1-0");  // an export in progress
  fs::create_directories(dir / "latest");
  testing::WriteFile(dir / "5", "a file, not a version");
  auto versions = ListSavedModelVersions(dir.path());
  CO_ASSERT_OK(versions.status());
  EXPECT_EQ(*versions, (std::vector<int64_t>{3, 12}));
  EXPECT_EQ(ListSavedModelVersions(dir / "missing").status().code(),
            absl::StatusCode::kNotFound);
  // Nothing of the exports is left behind under a temporary name.
  int entries = 0;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    (void)entry;
    ++entries;
  }
  EXPECT_EQ(entries, 5);  // 3, 12, .tmp-99-1-0, latest, 5
}

CO_TEST(SavedModel, ExportRefusesBadSignaturesNamingThem) {
  ScratchDir dir;
  Mlp m = BuildMlp();
  Session session(*m.graph, TestRuntime());
  auto none = co_await ExportSavedModel(session, {}, dir.path(), 1);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  std::map<std::string, ExportSignature> no_outputs{
      {"predict", {.inputs = {{"x", m.features}}}}};
  auto empty = co_await ExportSavedModel(session, no_outputs, dir.path(), 1);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(empty.status().message(), "'predict'"));
  // A classification's outputs are "classes" and "scores"; a regression's
  // one output is "outputs": what a server's :classify and :regress read.
  std::map<std::string, ExportSignature> misnamed_classes{
      {"c",
       {.inputs = {{"x", m.features}},
        .outputs = {{"probabilities", m.probabilities}},
        .method_name = kClassifyMethodName}}};
  auto classify =
      co_await ExportSavedModel(session, misnamed_classes, dir.path(), 1);
  EXPECT_EQ(classify.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(classify.status().message(),
                                "signature 'c' (tensorflow/serving/classify) "
                                "has output 'probabilities'"))
      << classify.status();
  std::map<std::string, ExportSignature> misnamed_regression{
      {"r",
       {.inputs = {{"x", m.features}},
        .outputs = {{"y", m.probabilities}},
        .method_name = kRegressMethodName}}};
  auto regress =
      co_await ExportSavedModel(session, misnamed_regression, dir.path(), 1);
  EXPECT_EQ(regress.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(regress.status().message(),
                                "a regression has one output, named "
                                "\"outputs\""))
      << regress.status();
  // Variables never initialised: the read fails and nothing is written.
  auto uninitialized =
      co_await ExportSavedModel(session, ServingSignature(m), dir.path(), 1);
  EXPECT_EQ(uninitialized.status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(fs::exists(dir / "1"));
}

// Exports the MLP to dir/1, damages it with `damage`, and returns the
// load's status.
asio::awaitable<absl::Status> LoadDamaged(
    const ScratchDir& dir, std::function<void(const std::string&)> damage) {
  Mlp m = BuildMlp();
  Session session(*m.graph, TestRuntime());
  auto exported = co_await ExportedMlp(m, session, dir.path(), 1);
  if (!exported.ok()) co_return exported.status();
  damage(*exported);
  auto loaded = co_await LoadSavedModel(*exported, TestRuntime());
  co_return loaded.status();
}

CO_TEST(SavedModel, LoadFailuresNameTheFileAndTheCulprit) {
  {
    ScratchDir dir;
    absl::Status s = co_await LoadDamaged(
        dir, [](const std::string& path) { fs::remove(path + "/model.json"); });
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "model.json")) << s;
  }
  {
    ScratchDir dir;
    absl::Status s = co_await LoadDamaged(dir, [](const std::string& path) {
      std::string text = testing::ReadBytes(path + "/model.json");
      testing::WriteFile(path + "/model.json", text.substr(0, text.size() / 2));
    });
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "1/model.json")) << s;
  }
  {
    ScratchDir dir;
    absl::Status s = co_await LoadDamaged(dir, [](const std::string& path) {
      std::string text = testing::ReadBytes(path + "/model.json");
      const std::string op = "\"op\": \"MatMul\"";
      const size_t at = text.find(op);
      text.replace(at, op.size(), "\"op\": \"MatMulV9\"");
      testing::WriteFile(path + "/model.json", text);
    });
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "'MatMulV9'")) << s;
  }
  {
    ScratchDir dir;
    absl::Status s = co_await LoadDamaged(dir, [](const std::string& path) {
      std::string text = testing::ReadBytes(path + "/model.json");
      const size_t at = text.find("\"logits:0\"");
      text.replace(at, 10, "\"gone:0\"");
      testing::WriteFile(path + "/model.json", text);
    });
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  }
  {
    ScratchDir dir;
    absl::Status s = co_await LoadDamaged(dir, [](const std::string& path) {
      const std::string file = path + "/variables.safetensors";
      auto contents = ReadSafetensorsFile(file);
      std::vector<std::pair<std::string, Tensor>> kept;
      for (const auto& [name, t] : contents->tensors) {
        if (name != "layer2/weights") kept.emplace_back(name, t);
      }
      auto rebuilt = BuildSafetensors(kept, {{"global_step", "1"}});
      testing::WriteFile(file, SerializeSafetensors(*rebuilt));
    });
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "'layer2/weights'")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "variables.safetensors")) << s;
  }
  {
    ScratchDir dir;
    absl::Status s = co_await LoadDamaged(dir, [](const std::string& path) {
      const std::string file = path + "/variables.safetensors";
      std::string bytes = testing::ReadBytes(file);
      testing::WriteFile(file, bytes.substr(0, bytes.size() - 9));
    });
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "variables.safetensors")) << s;
  }
  {
    ScratchDir dir;
    absl::Status s = co_await LoadDamaged(dir, [](const std::string& path) {
      std::string deep(100000, '[');
      deep.push_back(']');
      testing::WriteFile(path + "/model.json", deep);
    });
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "nests deeper")) << s;
  }
}

}  // namespace
}  // namespace cosession::saved_model_test
